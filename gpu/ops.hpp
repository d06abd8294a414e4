// Operations on device buffers: cuBLAS products and CUDA kernels, the GPU
// counterparts of engine/ops/*.hpp and engine/optim.hpp. No CUDA in this header.
//
// Conventions (as in engine/):
// - Every pointer is device memory (DeviceBuffer<T>::data()); T is float or double.
// - A matrix is column-major and packed, as Eigen's Mat<S> stores it; rows are
//   tokens or samples, columns features (row-vector convention, X ∈ R^{n×d},
//   projections X W). gemm also takes row-major operands (Layout::row_major).
// - Batched data (attention over B sequences or heads) lies matrix after
//   matrix: matrix b of an n×m batch starts at b·n·m.
// - Forward functions overwrite their outputs. Backward functions ACCUMULATE
//   (+=) into every gradient they are given, like the engine's tape: zero the
//   gradients first (DeviceBuffer::zero) when starting afresh.
// - Work is queued on the default stream; functions that return a host value
//   (mse_loss, squared_norm, clip_grad_norm, row_comparison) wait for it.
// - Errors (no device, a failed launch, a cuBLAS status) throw std::runtime_error;
//   inconsistent sizes throw std::invalid_argument.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qkvlab::gpu {

// ---- Products (cuBLAS; TF32 off, so float products round as float) --------
enum class Op { none, transpose };
enum class Layout { col_major, row_major };

// C ← α op(A) op(B) + β C with op(A) m×k, op(B) k×n, C m×n, every matrix
// packed in `layout`.
template <class T>
void gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* A, const T* B, T beta, T* C,
          Layout layout = Layout::col_major);

// `batch` independent products C_b ← α op(A_b) op(B_b) + β C_b, with A_b at
// A + b·stride_a (likewise B, C); a stride of 0 reuses one matrix for every b.
template <class T>
void gemm_strided_batched(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* A, std::int64_t stride_a,
                          const T* B, std::int64_t stride_b, T beta, T* C, std::int64_t stride_c, int batch,
                          Layout layout = Layout::col_major);

// ---- Elementwise -------------------------------------------------------------
template <class T> void copy(std::size_t count, const T* X, T* Y);    // Y = X
template <class T> void axpy(std::size_t count, T alpha, const T* X, T* Y);  // Y += α X
template <class T> void scale(std::size_t count, T alpha, T* X);      // X ← α X

// Y = X + 1 b (b a 1×d row added to every row of the n×d matrix X; Y may be X).
template <class T> void add_bias(int n, int d, const T* X, const T* b, T* Y);
// db += Σ_rows dY (the X gradient is dY itself: axpy).
template <class T> void add_bias_backward(int n, int d, const T* dY, T* db);

// GELU(x) = x Φ(x), exact erf form;  dX += dY ⊙ (Φ(X) + X φ(X)).
template <class T> void gelu(std::size_t count, const T* X, T* Y);
template <class T> void gelu_backward(std::size_t count, const T* X, const T* dY, T* dX);
// ReLU(x) = max(x, 0);  dX += dY ⊙ [X > 0].
template <class T> void relu(std::size_t count, const T* X, T* Y);
template <class T> void relu_backward(std::size_t count, const T* X, const T* dY, T* dX);

// ---- Attention (engine/ops/attention.hpp, linear_attention.hpp) -------------
enum class Mask { causal, bidirectional };  // causal: query i sees keys j ≤ i

// `batch` independent heads: Q_b n×d_h, K_b m×d_h, V_b m×d_v, head_b n×d_v,
// scores and weights n×m. A causal mask needs n = m.
struct AttentionShape {
  int batch = 1, queries = 0, keys = 0, d_h = 0, d_v = 0;
};

// A = softmax_M(Q Kᵀ / sqrt(d_h)) row-wise (masked entries exactly 0), H = A V.
// A (batch·n·m values) is kept for the backward pass.
template <class T>
void attention_head(const AttentionShape& shape, Mask mask, const T* Q, const T* K, const T* V, T* A, T* H);
// dV += Aᵀ dH, dA = dH Vᵀ, dS = A ⊙ (dA − rowsum(A ⊙ dA)), dQ += dS K / sqrt(d_h),
// dK += dSᵀ Q / sqrt(d_h). `work` holds batch·n·m values (dA, then dS).
template <class T>
void attention_head_backward(const AttentionShape& shape, const T* Q, const T* K, const T* V, const T* A,
                             const T* dH, T* dQ, T* dK, T* dV, T* work);

// P = M ⊙ Q Kᵀ (no softmax, no scale), O = P V; P is kept for the backward pass.
template <class T>
void linear_attention(const AttentionShape& shape, Mask mask, const T* Q, const T* K, const T* V, T* P, T* O);
// dV += Pᵀ dO, dP = M ⊙ (dO Vᵀ), dQ += dP K, dK += dPᵀ Q. `work`: batch·n·m values (dP).
template <class T>
void linear_attention_backward(const AttentionShape& shape, Mask mask, const T* Q, const T* K, const T* V,
                               const T* P, const T* dO, T* dQ, T* dK, T* dV, T* work);

// ---- Normalization (engine/ops/norm.hpp) ------------------------------------
enum class Centering { mean, none };  // LayerNorm subtracts the row mean, RMSNorm does not

// Y = g ⊙ N(X) row-wise (g a 1×d row), N(x) = (x − μ)/sqrt(σ² + ε) (LayerNorm)
// or x/sqrt(‖x‖²/d + ε) (RMSNorm). Keeps N (n×d) and r = 1/sqrt(…) (n values).
template <class T>
void normalize_rows(int n, int d, const T* X, const T* g, T eps, Centering centering, T* Y, T* N, T* r);
// dn = dY ⊙ g;  dX += r (dn − [mean(dn)] − N mean(dn ⊙ N));  dg += Σ_rows dY ⊙ N.
template <class T>
void normalize_rows_backward(int n, int d, const T* dY, const T* g, const T* N, const T* r, Centering centering,
                             T* dX, T* dg);

// ---- Loss and optimizer (engine/ops/loss.hpp, engine/optim.hpp) -------------
// (1/N) Σ (P − Tgt)² over the N entries, summed in double.
template <class T> T mse_loss(std::size_t count, const T* P, const T* Tgt);
// dP += 2 dL (P − Tgt) / N.
template <class T> void mse_loss_backward(std::size_t count, const T* P, const T* Tgt, T dL, T* dP);

// Per-row comparison of two n×d matrices F (prediction) and G (target), summed over rows in double.
struct RowComparison {
  double squared_error = 0;   // Σ_i ‖f_i − g_i‖²
  double squared_target = 0;  // Σ_i ‖g_i‖²
  double cosine = 0;          // Σ_i cos(f_i, g_i), a row with a zero norm counting 0
};
template <class T> RowComparison row_comparison(int n, int d, const T* F, const T* G);

// One parameter (or its gradient) as a flat array on the device.
template <class T>
struct DeviceArray {
  T* data;
  std::size_t size;
};

// Σ x² over the array, summed in double.
template <class T> double squared_norm(std::size_t count, const T* X);
// ‖g‖ = sqrt(Σ_p ‖g_p‖²); when finite and above max_norm every gradient is
// scaled by max_norm/‖g‖. Returns ‖g‖ before clipping (engine/optim.hpp clip_grad_norm).
template <class T> double clip_grad_norm(const std::vector<DeviceArray<T>>& grads, double max_norm);

// AdamW exactly as engine/optim.hpp: step t ≥ 1 (counting from 1),
//   m ← β1 m + (1 − β1) g,  v ← β2 v + (1 − β2) g²,
//   θ ← θ − η λ θ  (only where decay),  θ ← θ − η (m/(1 − β1^t)) / (sqrt(v/(1 − β2^t)) + ε).
struct AdamWStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  std::int64_t t = 1;
  bool decay = true;
};
template <class T>
void adamw_update(std::size_t count, const AdamWStep& step, T* theta, const T* grad, T* m, T* v);

}  // namespace qkvlab::gpu
