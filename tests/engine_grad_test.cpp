// Gradients of every engine operation against central finite differences
// (gradcheck.hpp), forward values against direct formulas, and negative
// controls: deliberately wrong backward passes that the same checker must reject.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "engine/gradcheck.hpp"
#include "engine/ops.hpp"
#include "engine/rng.hpp"

namespace {

using namespace qkvlab::engine;
using MatD = Mat<double>;
using Vars = std::vector<Var<double>>;

// Central differences with h = 1e-5 in double are accurate to ~1e-10 relative
// (truncation h²/6 |φ'''| ≈ 2e-11, rounding u |φ|/h ≈ 1e-11 for O(1) values;
// see gradcheck.hpp), so 1e-6 leaves four orders of margin for a correct
// gradient, while a wrong gradient shows an O(1) error. The negative controls
// below must exceed 1e-3 (docs/math/conventions.md: a control fails by a wide margin).
constexpr double grad_tolerance = 1e-6;
constexpr double control_min_error = 1e-3;

MatD draw(Eigen::Index rows, Eigen::Index cols, std::uint64_t stream) {
  Rng rng(2024, stream);
  return normal_matrix<double>(rows, cols, 1.0, rng);
}

// Entries moved away from ReLU's kink at 0 by at least 0.1, so x ± h never crosses it.
MatD away_from_zero(MatD X) {
  return X.unaryExpr([](double x) { return x + std::copysign(0.1, x); });
}

TEST(EngineGrad, Matmul) {
  const double err = gradcheck_rel_err([](Tape<double>&, const Vars& x) { return matmul(x[0], x[1]); },
                                       {draw(4, 3, 1), draw(3, 5, 2)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, MatmulOperatorIsMatmul) {
  Tape<double> tape;
  const MatD A = draw(2, 3, 1), B = draw(3, 2, 2);
  EXPECT_EQ((tape.constant(A) * tape.constant(B)).value(), matmul(tape.constant(A), tape.constant(B)).value());
  // OpenBLAS (engine/blas.hpp) may round differently from Eigen's kernel: equal to rounding.
  EXPECT_LT(((tape.constant(A) * tape.constant(B)).value() - A * B).norm(), 1e-14 * (A * B).norm());
}

TEST(EngineGrad, MatmulTransposed) {
  const double err = gradcheck_rel_err([](Tape<double>&, const Vars& x) { return matmul_nt(x[0], x[1]); },
                                       {draw(4, 3, 1), draw(5, 3, 2)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, AddAndOperatorPlus) {
  const double err = gradcheck_rel_err([](Tape<double>&, const Vars& x) { return add(x[0], x[1]) + x[0]; },
                                       {draw(3, 4, 1), draw(3, 4, 2)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, Scale) {
  const double err =
      gradcheck_rel_err([](Tape<double>&, const Vars& x) { return scale(x[0], -1.7); }, {draw(3, 4, 1)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, AddBias) {
  const double err = gradcheck_rel_err([](Tape<double>&, const Vars& x) { return add_bias(x[0], x[1]); },
                                       {draw(5, 4, 1), draw(1, 4, 2)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, SliceAndConcatColumnBlocks) {
  // Reorders and repeats head blocks of a 3-head, d_h = 2 matrix.
  const double err = gradcheck_rel_err(
      [](Tape<double>&, const Vars& x) {
        return concat_cols<double>(
            {slice_cols(x[0], 4, 2), x[1], slice_cols(x[0], 0, 3), slice_cols(x[0], 4, 2)});
      },
      {draw(4, 6, 1), draw(4, 1, 2)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, AttentionHeadCausal) {
  const double err = gradcheck_rel_err(
      [](Tape<double>&, const Vars& x) { return attention_head(x[0], x[1], x[2], Mask::causal); },
      {draw(5, 4, 1), draw(5, 4, 2), draw(5, 3, 3)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, AttentionHeadBidirectionalCrossLengths) {
  const double err = gradcheck_rel_err(
      [](Tape<double>&, const Vars& x) { return attention_head(x[0], x[1], x[2], Mask::bidirectional); },
      {draw(3, 4, 1), draw(6, 4, 2), draw(6, 2, 3)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, SelfAttentionTwoHeads) {
  const double err = gradcheck_rel_err(
      [](Tape<double>&, const Vars& x) { return self_attention(x[0], x[1], x[2], 2, Mask::causal); },
      {draw(4, 6, 1), draw(4, 6, 2), draw(4, 4, 3)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, MultiHeadAttentionBothMasks) {
  for (Mask mask : {Mask::causal, Mask::bidirectional}) {
    const double err = gradcheck_rel_err(
        [mask](Tape<double>&, const Vars& x) {
          return multi_head_attention(x[0], x[1], x[2], x[3], x[4], 3, mask);
        },
        {draw(5, 6, 1), draw(6, 6, 2), draw(6, 6, 3), draw(6, 6, 4), draw(6, 6, 5)});
    EXPECT_LT(err, grad_tolerance) << (mask == Mask::causal ? "causal" : "bidirectional");
  }
}

TEST(EngineGrad, LayerNormWithGain) {
  const double err = gradcheck_rel_err([](Tape<double>&, const Vars& x) { return layer_norm(x[0], x[1]); },
                                       {draw(4, 6, 1), draw(1, 6, 2)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, RmsNormWithGain) {
  const double err = gradcheck_rel_err([](Tape<double>&, const Vars& x) { return rms_norm(x[0], x[1]); },
                                       {draw(4, 6, 1), draw(1, 6, 2)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, Gelu) {
  const double err =
      gradcheck_rel_err([](Tape<double>&, const Vars& x) { return gelu(x[0]); }, {2.0 * draw(4, 5, 1)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, Relu) {
  const double err = gradcheck_rel_err([](Tape<double>&, const Vars& x) { return relu(x[0]); },
                                       {away_from_zero(draw(4, 5, 1))});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, Swiglu) {
  const double err = gradcheck_rel_err([](Tape<double>&, const Vars& x) { return swiglu(x[0], x[1]); },
                                       {2.0 * draw(4, 5, 1), draw(4, 5, 2)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, MseLossBothArguments) {
  const double err = gradcheck_rel_err([](Tape<double>&, const Vars& x) { return mse_loss(x[0], x[1]); },
                                       {draw(4, 3, 1), draw(4, 3, 2)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineGrad, CrossEntropy) {
  const double err = gradcheck_rel_err(
      [](Tape<double>&, const Vars& x) {
        return cross_entropy(x[0], {2, 0, 4, 4});
      },
      {3.0 * draw(4, 5, 1)});
  EXPECT_LT(err, grad_tolerance);
}

// A pre-LayerNorm transformer block and a read-out into cross-entropy: the
// gradient of a composition of every kind of operation.
TEST(EngineGrad, TransformerBlockEndToEnd) {
  const double err = gradcheck_rel_err(
      [](Tape<double>&, const Vars& x) {
        const Var<double> X = x[0];
        const Var<double> Y =
            X + multi_head_attention(layer_norm(X, x[1]), x[2], x[3], x[4], x[5], 2, Mask::causal);
        const Var<double> hidden = gelu(add_bias(matmul(rms_norm(Y, x[6]), x[7]), x[8]));
        const Var<double> Z = Y + swiglu(hidden, relu(matmul(Y, x[9]))) * x[10];
        return cross_entropy(matmul_nt(Z, x[11]), {1, 3, 0, 2, 2});
      },
      {draw(5, 4, 1), draw(1, 4, 2), draw(4, 4, 3), draw(4, 4, 4), draw(4, 4, 5), draw(4, 4, 6),
       draw(1, 4, 7), draw(4, 8, 8), draw(1, 8, 9), draw(4, 8, 10), draw(8, 4, 11), draw(6, 4, 12)});
  EXPECT_LT(err, grad_tolerance);
}

// --- Forward values against direct formulas -------------------------------

TEST(EngineForward, GeluIsExactErfForm) {
  // GELU(x) = x Φ(x): Φ(1) = 0.8413447460685429, Φ(-1) = 0.15865525393145707 (the tanh form is off by ~1e-4).
  Tape<double> tape;
  const MatD Y = gelu(tape.constant((MatD(1, 3) << 1, -1, 0).finished())).value();
  EXPECT_NEAR(Y(0), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(Y(1), -0.15865525393145707, 1e-15);
  EXPECT_EQ(Y(2), 0.0);
  Tape<float> single;
  const Mat<float> Y32 = gelu(single.constant((Mat<float>(1, 2) << 1, -1).finished())).value();
  EXPECT_NEAR(Y32(0), 0.8413447460685429, 3e-7);
  EXPECT_NEAR(Y32(1), -0.15865525393145707, 3e-7);
}

// SA(X) W_O computed entry by entry from docs/math/conventions.md, with explicit loops.
MatD mha_by_loops(const MatD& X, const MatD& W_Q, const MatD& W_K, const MatD& W_V, const MatD& W_O, int H,
                  Mask mask) {
  const MatD Q = X * W_Q, K = X * W_K, V = X * W_V;
  const Eigen::Index n = X.rows(), d_h = Q.cols() / H;
  MatD SA = MatD::Zero(n, Q.cols());
  for (int h = 0; h < H; ++h) {
    for (Eigen::Index i = 0; i < n; ++i) {
      const Eigen::Index visible = mask == Mask::causal ? i + 1 : n;
      std::vector<double> a(visible);
      double total = 0;
      for (Eigen::Index j = 0; j < visible; ++j) {
        double s = 0;
        for (Eigen::Index c = 0; c < d_h; ++c) s += Q(i, h * d_h + c) * K(j, h * d_h + c);
        a[j] = std::exp(s / std::sqrt(double(d_h)));
        total += a[j];
      }
      for (Eigen::Index j = 0; j < visible; ++j)
        for (Eigen::Index c = 0; c < d_h; ++c) SA(i, h * d_h + c) += a[j] / total * V(j, h * d_h + c);
    }
  }
  return SA * W_O;
}

TEST(EngineForward, MultiHeadAttentionMatchesDefinition) {
  const MatD X = draw(6, 8, 1), W_Q = draw(8, 8, 2), W_K = draw(8, 8, 3), W_V = draw(8, 8, 4),
             W_O = draw(8, 8, 5);
  for (Mask mask : {Mask::causal, Mask::bidirectional}) {
    Tape<double> tape;
    const MatD got = multi_head_attention(tape.constant(X), tape.constant(W_Q), tape.constant(W_K),
                                          tape.constant(W_V), tape.constant(W_O), 4, mask)
                         .value();
    const MatD want = mha_by_loops(X, W_Q, W_K, W_V, W_O, 4, mask);
    EXPECT_LT((got - want).norm() / want.norm(), 1e-14);
  }
}

TEST(EngineForward, CausalAttentionWeightsAreLowerTriangularRowStochastic) {
  // With V = I the head output is the attention matrix A itself.
  Tape<double> tape;
  const MatD A = attention_head(tape.constant(draw(5, 3, 1)), tape.constant(draw(5, 3, 2)),
                                tape.constant(MatD::Identity(5, 5)), Mask::causal)
                     .value();
  for (Eigen::Index i = 0; i < 5; ++i) {
    EXPECT_NEAR(A.row(i).sum(), 1.0, 1e-15);
    for (Eigen::Index j = i + 1; j < 5; ++j) EXPECT_EQ(A(i, j), 0.0);
  }
  EXPECT_EQ(A(0, 0), 1.0);
}

TEST(EngineForward, NormsMatchTheirDefinitions) {
  const MatD X = draw(3, 5, 1);
  const double eps = 1e-5;
  Tape<double> tape;
  const Var<double> g = tape.constant(MatD::Ones(1, 5));
  const MatD N = layer_norm(tape.constant(X), g, eps).value();
  const MatD R = rms_norm(tape.constant(X), g, eps).value();
  for (Eigen::Index i = 0; i < 3; ++i) {
    const double mu = X.row(i).mean();
    const double var = (X.row(i).array() - mu).square().mean();
    EXPECT_LT((N.row(i).array() - (X.row(i).array() - mu) / std::sqrt(var + eps)).abs().maxCoeff(), 1e-14);
    const double ms = X.row(i).squaredNorm() / 5;
    EXPECT_LT((R.row(i) - X.row(i) / std::sqrt(ms + eps)).cwiseAbs().maxCoeff(), 1e-14);
  }
}

TEST(EngineForward, CrossEntropyIsStableForHugeLogits) {
  // Rows [1e4, 0, -1e4] and [1e4, 1e4 + 1, 0]: exp would overflow without the max shift.
  Tape<double> tape;
  MatD Z(2, 3);
  Z << 1e4, 0, -1e4, 1e4, 1e4 + 1, 0;
  const double loss = cross_entropy(tape.constant(Z), {1, 0}).value()(0, 0);
  const double want =
      (1e4 + std::log1p(std::exp(-1e4) + std::exp(-2e4)) + 1 + std::log1p(std::exp(-1.0))) / 2;
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, want, 1e-12 * want);
}

TEST(EngineForward, MseLossIsMeanSquare) {
  Tape<double> tape;
  MatD P(1, 2), T(1, 2);
  P << 1, 2;
  T << 0, 4;
  EXPECT_EQ(mse_loss(tape.constant(P), tape.constant(T)).value()(0, 0), 2.5);
}

// --- Tape semantics ---------------------------------------------------------

TEST(EngineTape, ParameterGradientsAccumulateAcrossTapes) {
  Parameter<double> W("W", draw(3, 2, 1));
  const MatD X = draw(4, 3, 2), T = draw(4, 2, 3);
  MatD once;
  for (int pass = 1; pass <= 2; ++pass) {
    Tape<double> tape;
    tape.backward(mse_loss(matmul(tape.constant(X), tape.parameter(W)), tape.constant(T)));
    if (pass == 1) once = W.grad;
  }
  EXPECT_LT((W.grad - 2 * once).norm(), 1e-15 * once.norm());
}

TEST(EngineGrad, ReusedInputGetsEveryContribution) {
  // X W W: both uses of W must reach its gradient.
  const double err =
      gradcheck_rel_err([](Tape<double>&, const Vars& x) { return matmul(matmul(x[0], x[1]), x[1]); },
                        {draw(2, 3, 1), draw(3, 3, 2)});
  EXPECT_LT(err, grad_tolerance);
}

TEST(EngineTape, ParameterLeavesMatchVariableLeaves) {
  // The same computation, W entered as two parameter leaves or as one variable used twice.
  Parameter<double> W("W", draw(3, 3, 1));
  const MatD X = draw(2, 3, 2), T = draw(2, 3, 3);
  Tape<double> with_parameter, with_variable;
  with_parameter.backward(mse_loss(
      matmul(matmul(with_parameter.constant(X), with_parameter.parameter(W)), with_parameter.parameter(W)),
      with_parameter.constant(T)));
  const Var<double> W_var = with_variable.variable(W.value);
  with_variable.backward(
      mse_loss(matmul(matmul(with_variable.constant(X), W_var), W_var), with_variable.constant(T)));
  EXPECT_EQ(W.grad, W_var.grad());
}

TEST(EngineTape, ConstantsGetNoGradientAndBackwardNeedsOne) {
  Tape<double> tape;
  const Var<double> y = matmul(tape.constant(draw(2, 2, 1)), tape.constant(draw(2, 2, 2)));
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(tape.backward(y, MatD::Ones(2, 2)), std::invalid_argument);
}

TEST(EngineTape, RunsBackwardOnlyOnce) {
  // A second pass would add the intermediate gradients twice.
  Tape<double> tape;
  const Var<double> loss = mse_loss(tape.variable(draw(2, 2, 1)), tape.constant(draw(2, 2, 2)));
  tape.backward(loss);
  EXPECT_THROW(tape.backward(loss), std::invalid_argument);
}

TEST(EngineTape, ShapeMismatchesThrow) {
  Tape<double> tape;
  const Var<double> A = tape.variable(draw(2, 3, 1)), B = tape.variable(draw(2, 3, 2));
  EXPECT_THROW(matmul(A, B), std::invalid_argument);
  EXPECT_THROW(add(A, tape.variable(draw(3, 2, 3))), std::invalid_argument);
  EXPECT_THROW(add_bias(A, tape.variable(draw(1, 2, 4))), std::invalid_argument);
  EXPECT_THROW(slice_cols(A, 2, 2), std::invalid_argument);
  EXPECT_THROW(self_attention(A, A, A, 2, Mask::causal), std::invalid_argument);
  EXPECT_THROW(attention_head(A, tape.variable(draw(3, 3, 5)), tape.variable(draw(3, 3, 6)), Mask::causal),
               std::invalid_argument);
  EXPECT_THROW(cross_entropy(A, {0, 3}), std::invalid_argument);
  EXPECT_THROW(tape.backward(A), std::invalid_argument);  // not 1×1
  Tape<double> other;
  EXPECT_THROW(add(A, other.variable(draw(2, 3, 7))), std::invalid_argument);
}

// --- Negative controls: the checker must reject wrong gradients --------------

// GELU's forward with ReLU's backward.
Var<double> gelu_with_relu_backward(Var<double> X) {
  Tape<double>& tape = X.tape();
  Var<double> Y = tape.output(X.value().cwiseProduct(normal_cdf(X.value())), {X});
  tape.on_backward(Y, [X, Y] { X.grad().array() += (X.value().array() > 0).select(Y.grad().array(), 0.0); });
  return Y;
}

// A B with dA = dC B instead of dC Bᵀ (a forgotten transpose; B square so the shapes still fit).
Var<double> matmul_untransposed_backward(Var<double> A, Var<double> B) {
  Tape<double>& tape = A.tape();
  Var<double> C = tape.output(A.value() * B.value(), {A, B});
  tape.on_backward(C, [A, B, C] {
    A.grad() += C.grad() * B.value();
    B.grad() += A.value().transpose() * C.grad();
  });
  return C;
}

// Softmax attention whose backward forgets the −rowsum(A ⊙ dA) term of the softmax Jacobian.
Var<double> attention_without_softmax_correction(Var<double> Q, Var<double> K, Var<double> V) {
  const double c = 1 / std::sqrt(double(Q.cols()));
  MatD A = c * Q.value() * K.value().transpose();
  masked_softmax_rows(A, Mask::bidirectional);
  Tape<double>& tape = Q.tape();
  Var<double> head = tape.output(A * V.value(), {Q, K, V});
  tape.on_backward(head, [Q, K, V, head, c, A] {
    V.grad() += A.transpose() * head.grad();
    const MatD dS = A.cwiseProduct(head.grad() * V.value().transpose());
    Q.grad() += c * dS * K.value();
    K.grad() += c * dS.transpose() * Q.value();
  });
  return head;
}

// The correct matmul gradient, off by 0.1%: the checker's resolution.
Var<double> matmul_gradient_off_by_a_thousandth(Var<double> A, Var<double> B) {
  Tape<double>& tape = A.tape();
  Var<double> C = tape.output(A.value() * B.value(), {A, B});
  tape.on_backward(C, [A, B, C] {
    A.grad() += 1.001 * C.grad() * B.value().transpose();
    B.grad() += 1.001 * A.value().transpose() * C.grad();
  });
  return C;
}

TEST(EngineGradControl, GeluWithReluBackwardIsRejected) {
  const std::vector<MatD> x = {2.0 * draw(4, 5, 1)};
  EXPECT_LT(gradcheck_rel_err([](Tape<double>&, const Vars& v) { return gelu(v[0]); }, x), grad_tolerance);
  const double err =
      gradcheck_rel_err([](Tape<double>&, const Vars& v) { return gelu_with_relu_backward(v[0]); }, x);
  EXPECT_GT(err, control_min_error);
}

TEST(EngineGradControl, UntransposedMatmulGradientIsRejected) {
  const double err =
      gradcheck_rel_err([](Tape<double>&, const Vars& v) { return matmul_untransposed_backward(v[0], v[1]); },
                        {draw(4, 4, 1), draw(4, 4, 2)});
  EXPECT_GT(err, control_min_error);
}

TEST(EngineGradControl, SoftmaxBackwardWithoutRowsumIsRejected) {
  const double err = gradcheck_rel_err(
      [](Tape<double>&, const Vars& v) { return attention_without_softmax_correction(v[0], v[1], v[2]); },
      {draw(4, 3, 1), draw(5, 3, 2), draw(5, 2, 3)});
  EXPECT_GT(err, control_min_error);
}

TEST(EngineGradControl, GradientOffByOneThousandthIsRejected) {
  const double err = gradcheck_rel_err(
      [](Tape<double>&, const Vars& v) { return matmul_gradient_off_by_a_thousandth(v[0], v[1]); },
      {draw(4, 3, 1), draw(3, 5, 2)});
  EXPECT_NEAR(err, 1e-3, 1e-6);
  EXPECT_GT(err, 100 * grad_tolerance);
}

// --- Float: the same code at single precision -------------------------------

TEST(EngineFloat, TransformerGradientsAgreeWithDouble) {
  const std::vector<MatD> x = {draw(5, 8, 1), draw(8, 8, 2), draw(8, 8, 3),
                               draw(8, 8, 4), draw(8, 8, 5), draw(1, 8, 6)};
  auto run = [&x]<class S>(S) {
    Tape<S> tape;
    std::vector<Var<S>> v;
    for (const MatD& m : x) v.push_back(tape.variable(m.cast<S>()));
    const Var<S> Y = multi_head_attention(layer_norm(v[0], v[5]), v[1], v[2], v[3], v[4], 2, Mask::causal);
    tape.backward(Y, Mat<S>::Ones(Y.rows(), Y.cols()));
    return std::pair{Y.value().template cast<double>().eval(), v[1].grad().template cast<double>().eval()};
  };
  const auto [y32, g32] = run(float{});
  const auto [y64, g64] = run(double{});
  // Float's unit roundoff is 2^-24 ≈ 6e-8; a few hundred roundings stay well below 1e-5.
  EXPECT_LT((y32 - y64).norm() / y64.norm(), 1e-5);
  EXPECT_LT((g32 - g64).norm() / g64.norm(), 1e-5);
}

}  // namespace
