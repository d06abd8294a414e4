#include "analysis/measures.hpp"

#include <algorithm>
#include <cmath>

#include "core/errors.hpp"
#include "core/random_matrix.hpp"
#include "engine/blas.hpp"
#include "engine/kernels/pattern_reduction.hpp"
#include "engine/kernels/state_reduction.hpp"

namespace qkvlab::analysis {

PatternReductions reduce_pattern(const float* pattern, int H, int T) {
  PatternReductions r;
  r.H = H, r.T = T;
  const std::size_t n = std::size_t(H) * T;
  r.columns.assign(n, 0.0), r.mass.assign(n, 0.0), r.entropy.assign(n, 0.0);
  for (int h = 0; h < H; ++h) {
    const std::size_t at = std::size_t(h) * T;
    engine::kernels::reduce_pattern_rows(pattern + at * T, std::size_t(T), 0, T, r.columns.data() + at,
                                         r.mass.data() + at, r.entropy.data() + at);
  }
  return r;
}

std::vector<double> token_importance(const HeadSums& p) {
  std::vector<double> a(std::size_t(p.T), 0.0);
  for (int h = 0; h < p.H; ++h)
    for (int j = 0; j < p.T; ++j) a[std::size_t(j)] += p.columns[std::size_t(h) * p.T + j];
  for (double& x : a) x /= p.H;
  return a;
}

std::vector<double> token_importance(const float* pattern, int H, int T) {
  return token_importance(reduce_pattern(pattern, H, T).view());
}

namespace {

// Zero weights add nothing (0 log 0 = 0); a NaN or ±Inf weight makes the entropy NaN, never dropped.
double entropy_of(const std::vector<double>& weights) {
  double total = 0, e = 0;
  for (double w : weights) total += w;
  if (!std::isfinite(total)) return std::nan("");
  for (double w : weights)
    if (w != 0) e -= (w / total) * std::log(w / total);
  return e;
}

// Σ_h x_h,i per query i (heads in order), over H·T.
std::vector<double> head_mean_over_queries(const double* x, int H, int T) {
  std::vector<double> a(std::size_t(T), 0.0);
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < T; ++i) a[std::size_t(i)] += x[std::size_t(h) * T + i];
  for (double& v : a) v /= double(H) * T;
  return a;
}

}  // namespace

double attention_entropy(const HeadSums& p, EntropyDefinition definition) {
  if (definition == EntropyDefinition::column) return entropy_of(token_importance(p));
  const std::vector<double> a = head_mean_over_queries(definition == EntropyDefinition::printed ? p.mass : p.entropy, p.H, p.T);
  if (definition == EntropyDefinition::printed) return entropy_of(a);  // a_i = (1/T) Σ_j Ā_ij, the row means
  double e = 0;
  for (double x : a) e += x;
  return e;
}

double attention_entropy(const float* pattern, int H, int T, EntropyDefinition definition) {
  return attention_entropy(reduce_pattern(pattern, H, T).view(), definition);
}

double token_similarity(const double* unit_sum, int columns, double nonzero, int T) {
  if (T < 2) return std::nan("");
  double sum = 0;
  for (int c = 0; c < columns; ++c) sum += unit_sum[c] * unit_sum[c];
  return (sum - nonzero) / (double(T) * double(T - 1));
}

double token_similarity(const RowMatrix& X) {
  const engine::StateShape s{1, int(X.rows()), 1, int(X.cols())};
  std::vector<double> norms(std::size_t(s.T)), unit(std::size_t(s.width));
  engine::kernels::state_norm_rows(s, X.data(), 0, std::size_t(s.T), norms.data());
  engine::kernels::state_unit_columns(s, X.data(), norms.data(), 0, 0, s.width, unit.data());
  double nonzero = 0;
  for (double n : norms) nonzero += n != 0;
  return token_similarity(unit.data(), s.width, nonzero, s.T);
}

std::vector<double> gram_spectrum(const double* gram, int m, int top_k) {
  const MatD M = Eigen::Map<const MatD>(gram, m, m);  // symmetric: row- and column-major read alike
  if (top_k > 0) {  // Lanczos on AᵀA = M, A = sqrt(D) Lᵀ P from M's pivoted LDLᵀ (D ≥ 0 up to rounding)
    const Eigen::LDLT<MatD> f(M);
    const VecD d = f.vectorD().cwiseMax(0.0).cwiseSqrt();
    const MatD A = d.asDiagonal() * MatD(f.matrixU()) * f.transpositionsP();
    const TopGramEigenvalues top = top_gram_eigenvalues(A, std::min(top_k, m));
    if (!top.ok) throw NumericalError("spectrum: the Lanczos solver did not converge");
    return top.values;
  }
  MatD A = M;
  std::vector<double> ev;
  if (!engine::symmetric_eigenvalues(A, ev)) throw NumericalError("spectrum: the eigensolver did not converge");
  std::sort(ev.rbegin(), ev.rend());
  return ev;
}

std::vector<double> covariance_spectrum(const RowMatrix& X) {
  const int T = int(X.rows()), n = int(X.cols()), m = std::min(T, n);
  std::vector<double> gram(std::size_t(m) * m);
  engine::kernels::state_gram_sequence(0, T, n, X.data(), 1.0 / T, gram.data());
  return gram_spectrum(gram.data(), m);
}

double first_ratio(const std::vector<double>& x) {
  if (x.size() < 2) return std::nan("");
  double rest = 0;
  for (std::size_t j = 1; j < x.size(); ++j) rest += x[j];
  return x[0] / (rest / double(x.size() - 1));
}

RowMatrix cosine_matrix(const RowMatrix& X) {
  RowMatrix U = X;
  for (Eigen::Index i = 0; i < U.rows(); ++i) {
    const double n = U.row(i).norm();
    if (n > 0) U.row(i) /= n;
  }
  return U * U.transpose();
}

RowMatrix combine_heads(const float* data, int T, int heads, int width, HeadCombination how) {
  const Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> X(data, T,
                                                                                                 heads * width);
  if (how == HeadCombination::concat) return X.cast<double>();
  RowMatrix M = RowMatrix::Zero(T, width);
  for (int h = 0; h < heads; ++h) M += X.middleCols(Eigen::Index(h) * width, width).cast<double>() / heads;
  return M;
}

namespace {

double dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int c = 0; c < n; ++c) s += double(a[c]) * double(b[c]);
  return s;
}

double cosine(const Eigen::VectorXd& a, const Eigen::VectorXd& b, const char* approximation, int token) {
  const double c = a.dot(b) / (a.norm() * b.norm());
  if (!std::isfinite(c))
    throw NumericalError(std::string("cross-layer attention: the cosine of Eq. 2 and ") + approximation +
                         " at token " + std::to_string(token) + " is not finite (a zero or non-finite output)");
  return c;
}

}  // namespace

CrossLayerCosines cross_layer_cosines(const AttentionLayer& n, const float* k_m, const float* v_m, double scale) {
  const int T = n.T, dk = n.dk, dv = n.dv, group = n.H / n.G;
  const std::size_t ldq = std::size_t(n.H) * dk, ldk = std::size_t(n.G) * dk, ldv = std::size_t(n.G) * dv;
  Eigen::VectorXd exact(n.H * dv), shared(n.H * dv), identity(n.H * dv);
  std::vector<double> s(static_cast<std::size_t>(T)), r(static_cast<std::size_t>(T));
  CrossLayerCosines out;
  for (int i = 0; i < T; ++i) {
    exact.setZero(), shared.setZero(), identity.setZero();
    for (int h = 0; h < n.H; ++h) {
      const std::size_t g = std::size_t(h / group);
      const float* q = n.q + i * ldq + std::size_t(h) * dk;
      double top = -INFINITY;
      for (int j = 0; j <= i; ++j) {
        s[std::size_t(j)] = scale * dot(q, n.k + j * ldk + g * dk, dk);
        r[std::size_t(j)] = scale * dot(q, k_m + j * ldk + g * dk, dk);
        top = std::max({top, s[std::size_t(j)], r[std::size_t(j)]});
      }
      const float* a = n.pattern + (std::size_t(h) * T + i) * T;
      double z = 0;
      for (int j = 0; j <= i; ++j) {
        const double es = std::exp(s[std::size_t(j)] - top), er = std::exp(r[std::size_t(j)] - top);
        const float *vn = n.v + j * ldv + g * dv, *vm = v_m + j * ldv + g * dv;
        z += es + er;
        for (int c = 0; c < dv; ++c) {
          const Eigen::Index at = Eigen::Index(h) * dv + c;
          exact[at] += es * vn[c] + er * vm[c];
          shared[at] += 0.5 * a[j] * (double(vn[c]) + double(vm[c]));
          identity[at] += double(a[j]) * vn[c];
        }
      }
      exact.segment(Eigen::Index(h) * dv, dv) /= z;
      for (int c = 0; c < dv; ++c) identity[Eigen::Index(h) * dv + c] += v_m[i * ldv + g * dv + std::size_t(c)];
    }
    out.eq3 += cosine(exact, shared, "Eq. 3", i) / T;
    out.eq6 += cosine(exact, identity, "Eq. 6", i) / T;
  }
  return out;
}

}  // namespace qkvlab::analysis
