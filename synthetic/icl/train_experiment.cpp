#include "synthetic/icl/train_experiment.hpp"

#include "core/errors.hpp"
#include "core/parallel.hpp"
#include "engine/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>

namespace qkvlab::icl {

DecoderAccounting decoder_accounting(VariantKind v, FirstLayer first, int d) {
  const long dd = long(d) * d;
  const bool attention_first = first == FirstLayer::attention;
  const qkv::Mix values = layer_two_values(v);  // layer 1 (E) or layer 2's own (F), per head
  long value_heads2 = 0;
  bool reads_first = false;
  for (int h = 0; h < 2; ++h) {
    value_heads2 += qkv::reads_layer(values, h, 1) ? 1 : 0;
    reads_first = reads_first || qkv::reads_layer(values, h, 0);
  }
  DecoderAccounting a;
  a.kv_cache_per_token = 2L * d + value_heads2 * d;            // layer 2 keys and own values
  if (attention_first) a.kv_cache_per_token += 4L * d;         // layer 1 keys and values (V_1 reused)
  else if (reads_first) a.kv_cache_per_token += d;             // the raw token E for the heads reading it
  a.parameters = 2 * 2 * dd + value_heads2 * dd + 2 * dd + dd;  // layer 2 W_Q, W_K, W_V, W_O; H
  if (attention_first) a.parameters += 2 * 2 * dd + 2 * dd + 2 * dd;
  if (first == FirstLayer::copying_learned) a.parameters += dd;
  return a;
}

void validate(const TrainExperimentConfig& c) {
  validate(c.task);
  require_posterior(c.task);  // C = E c(D) and the bounds (estimate_theory)
  validate(TwoLayerConfig{VariantKind::vanilla, c.first, c.task.d, c.task.n, c.a});
  validate(c.train);
  if (c.models.empty()) throw UsageError("the list of models is empty");
  if (c.restarts < 1) throw UsageError("restarts must be at least 1");
  if (c.eval_samples < 2) throw UsageError("held-out samples must be at least 2");
  if (c.theory_prompts < 2) throw UsageError("Monte Carlo prompts of the bounds must be at least 2");
  if (c.threads < 0) throw UsageError("threads must be non-negative (0: one per hardware thread)");
}

TrainExperimentResult run_train_experiment(const TrainExperimentConfig& c,
                                           const std::function<void(int, int)>& progress) {
  validate(c);
  TrainExperimentResult r;
  r.config = c;
  const Theory theory = estimate_theory(c.task, {c.theory_prompts, c.seed, c.threads});
  r.C = theory.C;
  if (c.first != FirstLayer::attention) r.theory = theory;
  const int M = int(c.models.size());
  r.runs.resize(std::size_t(M * c.restarts));
  const std::string base = "icl/train/" + c.tag + "/";
  std::mutex mutex;
  int done = 0;
  parallel_for(M * c.restarts, c.threads, [&](int i) {
    TrainRun& run = r.runs[std::size_t(i)];
    run.model = c.models[std::size_t(i / c.restarts)], run.restart = i % c.restarts;
    const std::string r_tag = std::to_string(run.restart);
    Rng init(c.seed, base + "init/" + variant_name(run.model) + "/" + r_tag), data(c.seed, base + "batches/" + r_tag);
    engine::CpuBackend<double> backend(1);  // one run per thread
    TwoLayerModel model(backend, {run.model, c.first, c.task.d, c.task.n, c.a}, init);
    run.trained_parameters = long(model.params().layout.count());
    const Predictor predict = trained_predictor(model, make_token_batch);
    // The untrained model's loss on the first held-out prompts, against which divergence is judged.
    const double initial =
        held_out_loss(c.task, predict, divergence_prompts(c.eval_samples), c.seed, base + "eval").value;
    run.curve = train_on_fresh_prompts(model, c.task, data, c.train);
    run.selection_loss = held_out_loss(c.task, predict, c.eval_samples, c.seed, base + "select").value;
    run.loss = held_out_loss(c.task, predict, c.eval_samples, c.seed, base + "eval");
    // The same first prompts (held_out_loss draws them in order).
    if (const std::string why = divergence(c.task, variant_name(run.model) + " restart " + r_tag, run.loss.per_prompt, initial);
        !why.empty())
      throw NumericalError(why);
    std::lock_guard lock(mutex);
    if (progress) progress(++done, M * c.restarts);
  });
  for (int m = 0; m < M; ++m) {
    ModelSummary s;
    s.model = c.models[std::size_t(m)];
    s.accounting = decoder_accounting(s.model, c.first, c.task.d);
    s.best = m * c.restarts, s.min = 1e300, s.max = -1e300;
    for (int k = 0; k < c.restarts; ++k) {
      const int i = m * c.restarts + k;
      const double v = r.runs[std::size_t(i)].loss.value;
      if (r.runs[std::size_t(i)].selection_loss < r.runs[std::size_t(s.best)].selection_loss) s.best = i;
      s.min = std::min(s.min, v), s.max = std::max(s.max, v), s.mean += v / c.restarts;
    }
    s.best_loss = r.runs[std::size_t(s.best)].loss.value, s.best_se = r.runs[std::size_t(s.best)].loss.se;
    if (r.theory && s.model == VariantKind::vanilla) s.reference = r.theory->mha_bound[std::size_t(c.a)];
    if (r.theory && s.model == VariantKind::skipv1) s.reference = r.theory->skipv1_value[std::size_t(c.a)];
    r.models.push_back(s);
  }
  const auto find = [&](VariantKind v) {
    return std::find_if(r.models.begin(), r.models.end(), [v](const ModelSummary& s) { return s.model == v; });
  };
  if (find(VariantKind::vanilla) != r.models.end() && find(VariantKind::skipv1) != r.models.end())
    r.skipv1_minus_mha = paired_difference(r.runs[std::size_t(find(VariantKind::skipv1)->best)].loss,
                                           r.runs[std::size_t(find(VariantKind::vanilla)->best)].loss);
  return r;
}

Task task_of(const TrainSettings& s) {
  if (!std::isfinite(s.w0_scale)) throw UsageError("the prior mean's scale must be a finite number");
  Task t{s.d, s.n, s.sigma, {}};
  if (s.w0_scale != 0) t.W0 = s.w0_scale * MatD::Identity(s.d, s.d);
  validate(t);
  return t;
}

TrainConfig train_of(const TrainSettings& s) {
  TrainConfig t;
  t.steps = s.steps, t.batch = s.batch, t.lr = s.lr;
  t.log_every = std::max(1, s.steps / 100);
  validate(t);
  return t;
}

TrainExperimentConfig train_experiment_of(const TrainSettings& s, FirstLayer first, int a,
                                          const std::vector<VariantKind>& models, long theory_prompts) {
  TrainExperimentConfig c;
  c.task = task_of(s);
  c.first = first;
  c.a = a < 0 ? c.task.d : a;
  c.models = models;
  c.train = train_of(s);
  c.restarts = s.restarts, c.eval_samples = s.eval_samples, c.theory_prompts = theory_prompts;
  c.seed = s.seed, c.threads = s.threads;
  validate(c);
  return c;
}

}  // namespace qkvlab::icl
