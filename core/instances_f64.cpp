// Core's templates at double (core/instances.hpp).
#include "core/instances.hpp"

QKVLAB_CORE_INSTANCES(double)

// Eigen's SVDs of a double matrix (declared extern in core/types.hpp).
template class Eigen::JacobiSVD<qkvlab::MatD>;
template class Eigen::BDCSVD<qkvlab::MatD>;
