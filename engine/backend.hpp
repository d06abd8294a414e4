// The kernels a model is written against, with one set of signatures for the
// CPU (engine/cpu_backend.hpp, kernels in engine/kernels/) and for CUDA
// (gpu/cuda_backend.hpp). A model (lm/model.hpp, synthetic/transfer's skip
// MLP) is one definition that calls these; choosing `--device cpu|cuda`
// chooses which implementation runs it.
//
// Conventions, as in llm.c:
// - Every pointer is the backend's memory (host memory for the CPU, device
//   memory for CUDA), obtained through allocate(); a model never dereferences one.
// - Data is row-major. Activations are (N, C) with N = B·T rows (sequence b,
//   position t at row b·T + t); a weight W of a linear map is (in, out), the
//   row-vector convention X W of the papers; head h of an (N, H·d) tensor is
//   the column block h·d … (h+1)·d − 1 of every row.
// - Forward kernels overwrite their outputs. Backward kernels ACCUMULATE (+=)
//   into every gradient they are given, so a gradient that several uses feed
//   (a tied embedding, a value head reused by later layers) is their sum; zero
//   gradients before a fresh backward pass.
// - Every reduction sums in a fixed order that does not depend on the number
//   of threads or blocks, so results are the same at any thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "engine/buffer.hpp"
#include "engine/kernel_types.hpp"
#include "engine/rope_frequencies.hpp"
#include "engine/weight_type.hpp"

namespace qkvlab::engine {

template <class S>
class Backend : public Memory {
 public:
  virtual Device device() const = 0;
  virtual std::string description() const = 0;  // e.g. "cpu (2 threads, OpenBLAS)"

  // Memory (allocate, release, upload, download): engine/buffer.hpp.
  virtual void synchronize() = 0;  // waits until queued work is done

  // ---- Elementwise and strided copies ------------------------------------
  // Y[r, 0:cols] = α X[r, 0:cols] + β Y[r, 0:cols] for r < rows, with row
  // strides ldx, ldy (β = 0 overwrites: Y's old contents are ignored, NaN too;
  // α = β = 0 writes zeros without reading X).
  virtual void axpby(int rows, int cols, S alpha, const S* X, int ldx, S beta, S* Y, int ldy) = 0;
  virtual void fill(std::size_t count, S value, S* X) = 0;
  // Σ x_i y_i, summed in double in a fixed order.
  virtual double dot(std::size_t count, const S* X, const S* Y) = 0;

  // ---- Products ------------------------------------------------------------
  // For b < batch: C_b = α op(A_b) op(B_b) + β C_b, with op(A_b) m×k, op(B_b)
  // k×n, C_b m×n, row-major with leading dimensions lda, ldb, ldc, and A_b at
  // A + b·stride_a (likewise B, C). The elements of A and B are first rounded to
  // product_type() (below); C, α and β are S.
  virtual void gemm(Trans ta, Trans tb, int m, int n, int k, S alpha, const S* A, int lda, std::int64_t stride_a,
                    const S* B, int ldb, std::int64_t stride_b, S beta, S* C, int ldc, std::int64_t stride_c,
                    int batch) = 0;
  // Y[r, 0:cols] = the floats of W[row(r), 0:cols], a matrix of 16-bit weights of `type` (bf16 or
  // f16, engine/weight_type.hpp's widen_bits), row(r) = rows_of ? rows_of[r] : r, row strides ldw, ldy:
  // a panel of a weight widened for a float product (engine/weight.hpp), or an embedding's lookup.
  virtual void widen(int rows, int cols, const std::uint16_t* W, int ldw, const std::int32_t* rows_of,
                     WeightType type, S* Y, int ldy) = 0;
  // Y[r, 0:cols] += b (b of length cols) for every row r < rows (row stride ldy).
  virtual void add_bias(int rows, int cols, const S* b, S* Y, int ldy) = 0;
  // db += Σ_r dY[r, 0:cols] (row stride ldy).
  virtual void bias_backward(int rows, int cols, const S* dY, int ldy, S* db) = 0;

  // ---- Embedding -----------------------------------------------------------
  // out[n, :] = wte[ids[n], :] + (wpe ? wpe[n mod T, :] : 0) for n < B·T.
  virtual void embedding_forward(int B, int T, int C, const std::int32_t* ids, const S* wte, const S* wpe,
                                 S* out) = 0;
  // dwte[ids[n], :] += dout[n, :];  dwpe[t, :] += Σ_b dout[b·T + t, :] (when dwpe).
  virtual void embedding_backward(int B, int T, int C, const std::int32_t* ids, const S* dout, S* dwte,
                                  S* dwpe) = 0;

  // ---- Normalization (LayerNorm and RMSNorm), row-wise over C --------------
  // out = g ⊙ n(x) (+ bias), n(x) = (x − μ)·r (LayerNorm) or x·r (RMSNorm), r =
  // 1/sqrt(σ² + ε) resp. 1/sqrt(‖x‖²/C + ε); keeps μ and r per row.
  virtual void norm_forward(int N, int C, Centering centering, S eps, const S* X, const S* gain, const S* bias,
                            S* out, S* mean, S* rstd) = 0;
  // dn = dout ⊙ g; dX += r (dn − [mean(dn)] − n mean(dn ⊙ n)); dgain += Σ_rows dout ⊙ n;
  // dbias += Σ_rows dout (when dbias).
  virtual void norm_backward(int N, int C, Centering centering, const S* X, const S* gain, const S* mean,
                             const S* rstd, const S* dout, S* dX, S* dgain, S* dbias) = 0;

  // ---- Activations -----------------------------------------------------------
  virtual void gelu_forward(std::size_t count, GeluForm form, const S* X, S* Y) = 0;
  virtual void gelu_backward(std::size_t count, GeluForm form, const S* X, const S* dY, S* dX) = 0;
  // ReLU: Y = max(X, 0);  dX += dY ⊙ [X > 0] (the derivative at 0 taken as 0).
  virtual void relu_forward(std::size_t count, const S* X, S* Y) = 0;
  virtual void relu_backward(std::size_t count, const S* X, const S* dY, S* dX) = 0;
  // SwiGLU: Y = silu(G) ⊙ U;  dG += dY ⊙ U ⊙ silu'(G),  dU += dY ⊙ silu(G).
  virtual void swiglu_forward(std::size_t count, const S* G, const S* U, S* Y) = 0;
  virtual void swiglu_backward(std::size_t count, const S* G, const S* U, const S* dY, S* dG, S* dU) = 0;

  // ---- Rotary positions (Hugging Face's rotate_half) ------------------------
  // In place on X (N, heads·d) (a column block may be given through X and ld):
  // within each head, dimensions i and i + d/2 rotate by the angle
  // t·θ^(−2i/d), t the position of the row: past + (n mod T) (past > 0: the T positions
  // after the `past` already in a decoder's cache). backward = the inverse rotation.
  virtual void rope(int B, int T, int past, int heads, int d, int ld, const RopeFrequencies& f, bool inverse,
                    S* X) = 0;

  // ---- Causal softmax attention ---------------------------------------------
  // P_bh = softmax(scale · q_bh k_bgᵀ + causal mask) (zero above the diagonal),
  // z_bh = P_bh v_bg. `pattern` (B·H·T·T) is written and kept for the backward.
  // With a cache (s.past, s.capacity: engine/kernel_types.hpp) the T queries are
  // the positions after s.past, k and v the cache, the pattern B·H·T·s.keys().
  // k and v are one tensor each, or head by head where each lives (KvHeads). With s.segments > 1
  // (ResFormer's cross-layer attention) the queries attend over every segment's keys jointly, causal
  // within each, the pattern B·H·T·s.columns() (engine/kernel_types.hpp).
  virtual void attention_forward(const AttentionShape& s, S scale, const S* q, KvHeads<S> k, KvHeads<S> v,
                                 S* pattern, S* z) = 0;
  // The same z without keeping the pattern: each (b, h)'s queries are taken `block` at a time and
  // their pattern rows reduced to `sums` (PatternSums: column sums, and each query's mass and
  // entropy) before the next block is computed, so one block of rows per head exists at a time, never
  // B·H·T·T values. The rows are attention_forward's; the column sums add the queries in ascending
  // order; sums' null pointers are not computed (PatternSums{}: z alone, as an eval pass that keeps
  // no pattern runs). Plain shapes of one segment only (no cache).
  virtual void attention_reduce(const AttentionShape& s, S scale, const S* q, KvHeads<S> k, KvHeads<S> v,
                                int block, S* z, const PatternSums& sums) = 0;
  // dv += Pᵀ dz, dP = dz vᵀ, dS = P ⊙ (dP − rowsum(P ⊙ dP)), dq += scale dS k,
  // dk += scale dSᵀ q; the heads sharing a key/value head add in head order; with segments, per
  // segment's block of P and dS, into that segment's heads of dk and dv (one tensor each, (N, s.kv_heads()·d)).
  // `scratch` holds B·H·T·s.columns() values. Plain shapes only (no cache).
  virtual void attention_backward(const AttentionShape& s, S scale, const S* q, const S* k, const S* v,
                                  const S* pattern, const S* dz, S* dq, S* dk, S* dv, S* scratch) = 0;

  // ---- Reductions of token-major states (the analyses': analysis/measures.hpp) -------------------
  // Token similarity and the value spectrum reduce a state where it lives; only O(C) per sequence (or
  // the C×C Gram matrix) leaves the backend. StateShape combines row i of sequence b over its heads:
  // h_bi = x_bi (concat), or h_bi,c = Σ_h (x_bi,h·w+c / heads) with the heads added in order (mean).
  // In double: ‖h‖ = sqrt(Σ_c h_c²) (CPU: c ascending; CUDA: a block tree per row), the unit sums
  // add h_bi/‖h_bi‖ in ascending i and skip zero rows (RowSums).
  virtual void state_rows(const StateShape& s, const S* X, const RowSums& out) = 0;
  // The smaller Gram matrix of each sequence's rows X_b (T × C, heads side by side, packed), in double:
  // out_b = α X_bᵀ X_b (C × C) when T ≥ C, else α X_b X_bᵀ (T × T); m = min(T, C), out_b at out + b·m²
  // (symmetric, so either layout). The products sum in double (CPU: one serial double GEMM per
  // sequence; CUDA: cuBLAS's double GEMM), the same at any thread count and in every run.
  virtual void state_gram(int B, int T, int C, const S* X, double alpha, double* out) = 0;

  // ---- Loss --------------------------------------------------------------------
  // Per row n of logits (N, V): loss[n] = logsumexp(logits[n]) − logits[n, target[n]],
  // or 0 where target[n] < 0 (not predicted). With `dlogits`, also
  // dlogits[n] = scale (softmax(logits[n]) − onehot(target[n])) (0 where target < 0);
  // dlogits may be logits itself (overwritten in place).
  virtual void cross_entropy(int N, int V, const S* logits, const std::int32_t* targets, S* loss, S scale,
                             S* dlogits) = 0;

  // ---- Optimizer -------------------------------------------------------------
  // AdamW (engine/kernels/adamw.hpp's formulas) on `count` parameters: step t ≥ 1,
  // decay λ applied where `decay`.
  struct AdamW {
    double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
    std::int64_t t = 1;
  };
  virtual void adamw(std::size_t count, const AdamW& a, bool decay, S* theta, const S* grad, S* m, S* v) = 0;

  // ---- The type of the products' operands --------------------------------------
  // What gemm rounds each element of A and B to before it multiplies: f32 (nothing: the default)
  // or bf16, each to the nearest bf16, ties to even. The product of two bf16 values is exact in
  // float32 and the sums are float32, so a bf16 gemm is cuBLAS's bf16 GEMM with CUBLAS_COMPUTE_32F
  // and PyTorch's bf16 autocast of a matmul; C, α and β stay float32. attention_forward and
  // attention_backward round their products' operands too (q and k, P and v; dz and v, dS and k,
  // dS and q, P and dz), as autocast runs eager attention, with the softmax in float, and so does
  // attention_reduce (the evaluation passes': a bf16 run's validation has the products of its
  // training; the analyses leave the type at f32); every other kernel is untouched. A float backend
  // only (f16 is not offered: its range needs a training run's loss scaling); std::invalid_argument
  // otherwise.
  void set_product_type(WeightType t) {
    if (t == WeightType::f16 || (t == WeightType::bf16 && !std::is_same_v<S, float>))
      throw std::invalid_argument(std::string("products with ") + weight_type_name(t) +
                                  " operands are not offered on this backend (f32; bf16 on a float backend)");
    product_type_ = t;
  }
  WeightType product_type() const { return product_type_; }

 private:
  WeightType product_type_ = WeightType::f32;
};

// A backend's product type for a scope (a training run's), the one before restored after.
template <class S>
class ProductTypeScope {
 public:
  ProductTypeScope(Backend<S>& be, WeightType t) : be_(be), before_(be.product_type()) { be.set_product_type(t); }
  ~ProductTypeScope() { be_.set_product_type(before_); }
  ProductTypeScope(const ProductTypeScope&) = delete;
  ProductTypeScope& operator=(const ProductTypeScope&) = delete;

 private:
  Backend<S>& be_;
  WeightType before_;
};

}  // namespace qkvlab::engine
