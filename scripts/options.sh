# The option checks of the scripts' argument loops (sourced, not run). Each refusal is one line on
# stderr, "SCRIPT: what is wrong", and exit status 2, before the script does any work.
#
#   --jobs) need "$@"; jobs=$2; shift 2 ;;          a value follows (not the end, not empty)
#   integer_option --jobs "$jobs" 1 256             a decimal integer in [lo, hi]

usage_error() {  # MESSAGE
  echo "${0##*/}: $1" >&2
  exit 2
}

need() {  # OPTION [VALUE ...]: the argument loop's "$@" at OPTION
  (($# >= 2)) && [[ -n $2 ]] || usage_error "$1 needs a value"
}

integer_option() {  # OPTION VALUE LO HI (at most 9 digits: no overflow of bash's arithmetic)
  [[ $2 =~ ^(0|[1-9][0-9]{0,8})$ ]] && (($2 >= $3 && $2 <= $4)) ||
    usage_error "$1 must be an integer from $3 to $4, got '$2'"
}

one_of() {  # OPTION VALUE CHOICE ...
  local option=$1 value=$2 choice
  shift 2
  for choice in "$@"; do [[ $value == "$choice" ]] && return 0; done
  usage_error "$option must be one of $*, got '$value'"
}

regex_option() {  # OPTION VALUE: an extended regular expression as [[ =~ ]] reads it (status 2: invalid)
  local status=0
  [[ "" =~ $2 ]] || status=$?
  ((status < 2)) || usage_error "$1 '$2' is not a regular expression (POSIX extended, as bash's =~ reads it)"
}
