// Core's templates at float (core/instances.hpp).
#include "core/instances.hpp"

QKVLAB_CORE_INSTANCES(float)
