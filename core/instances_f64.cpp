// Core's templates at double (core/instances.hpp).
#include "core/instances.hpp"

QKVLAB_CORE_INSTANCES(double)
