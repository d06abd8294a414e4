// Core's templates at mp50 (core/instances.hpp).
#include "core/instances.hpp"

QKVLAB_CORE_INSTANCES(mp50)
