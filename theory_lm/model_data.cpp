#include "theory_lm/model_data.hpp"

#include <stdexcept>

#include "core/errors.hpp"
#include "engine/cpu_backend.hpp"
#include "lm/evaluate.hpp"
#include "lm/model_files.hpp"
#include "lm/parameters.hpp"

namespace qkvlab::theory_lm {

const MatD& ModelWeights::at(const std::string& name) const {
  const auto it = tensors.find(name);
  if (it == tensors.end()) throw std::logic_error("the checkpoint has no tensor " + name);
  return it->second;
}

const MatD& ModelWeights::layer(int l, const std::string& what) const { return at(lm::layer_tensor(l, what)); }
bool ModelWeights::has_layer(int l, const std::string& what) const { return has(lm::layer_tensor(l, what)); }
MatD ModelWeights::augmented(int l, const std::string& what) const {
  const MatD& W = layer(l, what + ".weight");
  MatD out = MatD::Zero(W.rows() + 1, W.cols());
  out.topRows(W.rows()) = W;
  if (has_layer(l, what + ".bias")) out.bottomRows(1) = layer(l, what + ".bias");
  return out;
}

const MatD& ModelWeights::unembedding() const { return config.tied ? at("wte") : at("lm_head.weight"); }

ModelWeights read_weights(const std::filesystem::path& dir) { return read_weights(lm::open_model(dir)); }

ModelWeights read_weights(const lm::ModelFiles& files) {
  ModelWeights w{files.dir, files.format, files.config, {}};
  const auto layout = lm::parameter_layout(files.config, lm::make_plan(files.config));
  lm::read_parameters(files, layout, [&](const engine::ParameterSpec& spec, const float* values) {
    const Eigen::Index rows = spec.shape.size() == 2 ? spec.shape[0] : 1, cols = spec.shape.back();
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    w.tensors[spec.name] = Eigen::Map<const RowMajor>(values, rows, cols).cast<double>();
  });
  return w;
}

namespace {

// Keeps resid_pre and attn_out of every layer, resid_post of the last and the final norm.
class Keep final : public lm::Recorder<float> {
 public:
  Keep(Activations& a, int layers) : a_(a), last_(layers - 1) {
    a_.resid_pre.resize(std::size_t(layers));
    a_.attn_out.resize(std::size_t(layers));
  }
  bool wants(lm::Site site, int layer) const override {
    using lm::Site;
    return site == Site::resid_pre || site == Site::attn_out || site == Site::final ||
           (site == Site::resid_post && layer == last_);
  }
  void record(const lm::Activation<float>& x) override {
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const MatD m = Eigen::Map<const RowMajor>(x.data, Eigen::Index(x.B) * x.T, x.width).cast<double>();
    switch (x.site) {
      case lm::Site::resid_pre: a_.resid_pre[std::size_t(x.layer)] = m; break;
      case lm::Site::attn_out: a_.attn_out[std::size_t(x.layer)] = m; break;
      case lm::Site::resid_post: a_.resid_final = m; break;
      default: a_.final_norm = m;
    }
  }

 private:
  Activations& a_;
  int last_;
};

// Keeps every layer's attention pattern.
class Patterns final : public lm::Recorder<float> {
 public:
  explicit Patterns(std::vector<MatD>& p) : p_(p) {}
  bool wants(lm::Site site, int) const override { return site == lm::Site::pattern; }
  void record(const lm::Activation<float>& x) override {
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    p_[std::size_t(x.layer)] = Eigen::Map<const RowMajor>(x.data, Eigen::Index(x.B) * x.heads * x.T, x.width).cast<double>();
  }

 private:
  std::vector<MatD>& p_;
};

}  // namespace

std::vector<MatD> attention_patterns(const std::filesystem::path& dir, const lm::TokenSequences& one_sequence) {
  engine::CpuBackend<float> backend(1);
  const auto model = lm::load_model(dir, backend);
  std::vector<MatD> p(std::size_t(model->config().layers));
  Patterns keep(p);
  model->forward(one_sequence.ids.data(), nullptr, 1, one_sequence.length, lm::Pass::eval, 0, &keep);
  return p;
}

Activations record_activations(const std::filesystem::path& dir, const lm::TokenSequences& tokens, int threads) {
  engine::CpuBackend<float> backend(threads);
  const auto model = lm::load_model(dir, backend);
  const lm::Config& c = model->config();
  lm::check_sequences(tokens, c, "the tokens");
  Activations a;
  a.tokens = tokens;
  a.sequences = int(tokens.sequences);
  a.length = tokens.length;
  Keep keep(a, c.layers);
  model->forward(tokens.ids.data(), nullptr, a.sequences, a.length, lm::Pass::eval, 0, &keep);
  return a;
}

MatD logits(const ModelWeights& weights, const Activations& activations) {
  return activations.final_norm * weights.unembedding().transpose();
}

double activation_bytes(const lm::Config& c, std::int64_t sequences, int seq_len) {
  return double(sequences) * seq_len * (8.0 * c.d * (2 * c.layers + 3) + 40.0 * c.d + 4.0 * c.heads * seq_len);
}

}  // namespace qkvlab::theory_lm
