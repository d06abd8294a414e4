// Every differentiable operation of the engine; see ops/*.hpp for each one's
// forward and backward formulas.
#pragma once

#include "engine/ops/activation.hpp"
#include "engine/ops/arithmetic.hpp"
#include "engine/ops/attention.hpp"
#include "engine/ops/blocks.hpp"
#include "engine/ops/loss.hpp"
#include "engine/ops/matmul.hpp"
#include "engine/ops/norm.hpp"
#include "engine/tape.hpp"
