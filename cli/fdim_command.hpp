// `qkvlab fdim` (fdim_command.cpp): the functional dimension of a small attention network.
#pragma once

#include "cli/commands.hpp"

namespace qkvlab::cli {
Command add_fdim_command(CLI::App& app, const std::string& command_line);
}
