// The small types every kernel signature shares, defined once for the backend
// interface (engine/backend.hpp) and both backends.
#pragma once

#include <cstddef>

namespace qkvlab::engine {

enum class Trans { none, transpose };       // op(A) = A or Aᵀ in a product
enum class Centering { mean, none };        // LayerNorm subtracts the row mean, RMSNorm does not
enum class GeluForm { tanh, erf };          // Hugging Face's gelu_new (tanh form) and the exact erf form
enum class Device { cpu, cuda };
enum class HeadCombination { concat, mean };  // a token-major state's heads as one row: side by side, or averaged

// Attention over B sequences of T tokens, H query heads of width dk (scores)
// and Hkv key/value heads (query head h reads key/value head h / (H / Hkv)),
// values of width dv. q is (N, H·dk), k (N, Hkv·dk), v (N, Hkv·dv) (or head by
// head where they live: KvHeads), the output z (N, H·dv) and the pattern
// (B, H, T, T), all row-major, N = B·T.
// Incremental decoding (lm/model.hpp's cache): the T queries of a sequence
// are its positions past … past + T − 1, and k and v hold `capacity` rows per
// sequence (sequence b from row b·capacity), of which the first keys() =
// past + T are read; query t sees keys j ≤ past + t and the pattern is
// (B, H, T, keys()). past = 0 and capacity = 0 (meaning keys()) is the plain
// case above; the backward kernels take only that.
// Segments (ResFormer's cross-layer attention, Eq. 2: U_n = softmax(Q_n [K_n; K_m]ᵀ) [V_n; V_m]):
// with `segments` = S > 1 the queries attend over S sets of keys and values jointly, each causal
// by itself (query t sees keys j ≤ past + t of every segment). k and v then hold S·Hkv heads, key/value
// head g of segment s being head s·Hkv + g (in one tensor, (N, S·Hkv·dk), or where each lives), and a
// pattern row has columns() = S·keys() values, segment s's at s·keys() …. S = 1 is plain attention.
struct AttentionShape {
  int B = 1, T = 1, H = 1, Hkv = 1, dk = 1, dv = 1;
  int past = 0, capacity = 0;
  int segments = 1;
  int group() const { return H / Hkv; }
  int keys() const { return past + T; }
  int columns() const { return segments * keys(); }     // a pattern row's values
  int kv_heads() const { return segments * Hkv; }       // the heads k and v hold
  int kv_rows() const { return capacity ? capacity : keys(); }  // rows of k and v per sequence
  bool plain() const { return past == 0 && kv_rows() == T; }
};

template <class S>
struct View {  // a row-major (rows, cols) block with leading dimension ld
  S* data;
  int ld;
};

// The Hkv key (or value) heads of width w an attention reads (Backend::attention_forward,
// attention_reduce): side by side in one tensor (`data`: head g at data + g·w, leading dimension
// Hkv·w), or each where it lives (`each[g]`: head g's first row and its leading dimension; sequence
// b's rows from row b·kv_rows(), as in a tensor). So a layer reads its own heads and another
// layer's cached ones in place (lm/model.cpp's attended: SkipV1's values) instead of a copy of both.
template <class S>
struct KvHeads {
  const S* data = nullptr;
  const View<const S>* each = nullptr;
  KvHeads(const S* tensor) : data(tensor) {}  // implicit: one tensor is the common case
  explicit KvHeads(const View<const S>* heads) : each(heads) {}
  View<const S> head(int g, int Hkv, int w) const {
    return each ? each[g] : View<const S>{data + std::size_t(g) * w, Hkv * w};
  }
};

// What the analyses reduce an attention pattern to (Backend::attention_reduce), per sequence b and
// query head h, in double, in the backend's memory:
//   columns  (B, H, T)  Σ_t P_tj over the queries t in ascending order (the attention key j receives)
//   mass     (B, H, T)  Σ_j P_tj per query t (1 up to rounding)
//   entropy  (B, H, T)  −Σ_j P_tj ln P_tj per query t (0 ln 0 = 0); not computed when null
// All null (PatternSums{}): no reduction, only the attention's output.
struct PatternSums {
  double* columns = nullptr;
  double* mass = nullptr;
  double* entropy = nullptr;
};

// A token-major state the analyses reduce where it lives (Backend::state_rows, state_gram): B sequences
// of T rows (sequence b from row b·T), `heads` blocks of `width` columns side by side (row-major, packed),
// each row combined over its heads (HeadCombination) into h_bi of columns() values.
struct StateShape {
  int B = 1, T = 1, heads = 1, width = 1;
  HeadCombination combine = HeadCombination::concat;
  int columns() const { return combine == HeadCombination::concat ? heads * width : width; }
};

// What Backend::state_rows reduces a state to, in double, in the backend's memory; null pointers are
// not computed:
//   norms    (B·T)   ‖h_bi‖
//   unit     (B, C)  Σ_{i: ‖h_bi‖ ≠ 0} h_bi / ‖h_bi‖ over the rows in ascending i (C = columns())
//   nonzero  (B)     #{i : ‖h_bi‖ ≠ 0}
struct RowSums {
  double* norms = nullptr;
  double* unit = nullptr;
  double* nonzero = nullptr;
};

}  // namespace qkvlab::engine
