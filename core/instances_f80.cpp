// Core's templates at long double (core/instances.hpp).
#include "core/instances.hpp"

QKVLAB_CORE_INSTANCES(long double)
