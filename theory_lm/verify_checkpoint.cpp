#include "theory_lm/verify_checkpoint.hpp"

#include <algorithm>
#include <functional>

#include "lm/describe.hpp"

namespace qkvlab::theory_lm {
namespace {

using theory::Claim;
using theory::SweepPoint;
using theory::Outcome;

std::string family_norm(const lm::Config& c) {
  if (!c.norm) return "none";
  return c.family == lm::Family::gpt2 ? "LayerNorm" : "RMSNorm";
}

// The 1-based layers whose W_Q is the identity (`lm eliminate`), as "1, 3".
std::string identity_query_layers(const lm::Config& c) {
  std::string s;
  for (int l = 0; l < c.layers; ++l)
    if (c.identity_query(l)) s += (s.empty() ? "" : ", ") + std::to_string(l + 1);
  return s;
}

// Why the attention claims do not apply, or "" when they do.
std::string attention_inapplicable(const lm::Config& c) {
  if (c.mla) return "multi-head latent attention: keys and values come from a shared latent, not per-head W_K, W_V";
  if (c.variant.kind == lm::VariantKind::q_identity) return "the model has no W_Q (Q-identity)";
  if (c.variant.kind != lm::VariantKind::vanilla)
    return "the variant " + lm::to_string(c.variant.kind) +
           " takes keys or values from other layers: a head's pair is not its own layer's projections";
  return "";
}

// Why a claim without a checkpoint form is not run.
std::string not_applicable(const std::string& id, const lm::Config& c) {
  const std::string norm = family_norm(c);
  if (!c.norm && (id == "qwe.lemma8.2" || id == "qwe.thm8.3" || id == "qwe.remark5"))
    return "the model has no norms (--norm none)";
  if (!c.norm && (id == "qwe.thm4.1" || id == "qwe.remark4"))
    return "a statement about eliminating W_Q, checked on random weights; on a norm-free checkpoint `lm eliminate` "
           "measures it and `verify --against` compares the result";
  if (id == "qwe.lemma8.2" || id == "qwe.thm8.3")
    return "the model has no LayerNorm in front of attention (its norms are RMSNorm: qwe.remark5 runs)";
  if (id == "qwe.remark5") return "the model's norms are LayerNorm, not RMSNorm or DyT (qwe.lemma8.2 and qwe.thm8.3 run)";
  if (id == "qwe.obs3.1")
    return "a statement about attention's form, checked on random weights; on checkpoints its consequence qwe.prop4.1 runs";
  if (id == "qwe.thm4.1" || id == "qwe.remark4")
    return "needs blocks without normalization; the model has " + norm + " in front of attention and MLP";
  if (id == "qwe.lemma8.5" || id == "qwe.thm4.2")
    return "needs attention-skip-only blocks; the model's blocks have both skips (and " + norm + ")";
  if (id == "qwe.lemma8.6" || id == "qwe.thm4.3") return "needs weight-shared layers; the model's layers have their own weights";
  if (id == "qwe.thm8.4" || id == "qwe.cor8.4.1")
    return std::string("needs a skip ReLU MLP; the model's MLP is ") + (c.family == lm::Family::gpt2 ? "GELU" : "SwiGLU");
  if (id.starts_with("qwe.sec8.3.1") || id == "qwe.scale8.2") return "a statement about random matrices: random weights only";
  if (id == "qwe.ext.qknorm") return "the model has no QK-norm (no lm family has one)";
  if (id == "qwe.ext.rope" && !c.rope()) return "the model has no RoPE (learned positions)";
  if (id == "qwe.ext.gqa" && c.kv_heads == c.heads) return "the model has no grouped-query attention (H_kv = H)";
  if ((id == "qwe.ext.rope" || id == "qwe.ext.gqa") && !attention_inapplicable(c).empty()) return attention_inapplicable(c);
  if (id == "qwe.ext.rope" || id == "qwe.ext.gqa")
    return "its freedom runs on the checkpoint as qwe.lemma3.1 and qwe.prop4.2, with M in the rotations' commutant "
           "(RoPE) and one block per key head (GQA), and their controls (a generic M, blocks differing in a group)";
  if (id == "qwe.freedom.vo" && c.variant.kind == lm::VariantKind::q_identity)  // the statement holds W_Q aside
    return "the checkpoint form reads each head from its attn.q, which a Q-identity model does not store (a limit of "
           "the check, not of the statement: W_V N, N^-1 W_O involves no W_Q)";
  if (id == "qwe.freedom.vo") return attention_inapplicable(c);
  if (id == "resformer.eq4") {
    if (!attention_inapplicable(c).empty()) return attention_inapplicable(c);
    if (c.layers < 2) return "needs two layers: layer 1's values and a layer n >= 2";
    return "the model has Q-identity layers (`lm eliminate`): the checkpoint form reads layers' W_Q";
  }
  if (id.starts_with("skipv1.")) return "the in-context linear-regression setting of SkipV1Former, not a language model";
  return "no checkpoint form: checked on random weights only";
}

using SiteCheck = std::function<Outcome(Precision, Rng&)>;

struct Builder {
  std::shared_ptr<const CheckpointData> data;
  CheckpointPlan& out;

  const lm::Config& config() const { return data->weights.config; }

  void add(const Claim& base, const std::string& site, SiteCheck check) {
    auto claim = std::make_unique<Claim>(Claim{base.id, base.statement + " (on the checkpoint's weights)",
                                               theory::Kind::identity, theory::Dims{false, false, false, false},
                                               base.budget, nullptr, {}, nullptr});
    claim->run = [check = std::move(check)](const SweepPoint&, Precision p, Rng& rng) { return check(p, rng); };
    const SweepPoint c{config().d, config().heads, 1, data->activations.length, Mask::causal, {.label = site}, 0};
    out.plan.configurations.emplace_back(claim.get(), c);
    out.claims.push_back(std::move(claim));
  }

  static std::string at(int layer) { return "layer=" + std::to_string(layer + 1); }

  void attention(const Claim& base) {
    const auto& d = data;
    for (int l = 0; l < config().layers; ++l) {
      if (config().identity_query(l)) continue;  // skipped with its reason (plan_checkpoint)
      if (base.id == "qwe.freedom.vo") {
        add(base, at(l), [d, l](Precision p, Rng& rng) {
          return with_scalar(p, [&]<class S>() { return value_freedom<S>(*d, l, rng); });
        });
        continue;
      }
      if (base.id == "qwe.prop4.2") {
        add(base, at(l), [d, l](Precision p, Rng& rng) {
          return with_scalar(p, [&]<class S>() { return block_diagonal_freedom<S>(*d, l, rng); });
        });
        continue;
      }
      for (int h = 0; h < config().heads; ++h) {
        const std::string head = at(l) + " head=" + std::to_string(h + 1);
        if (base.id == "qwe.prop4.1") {
          add(base, head, [d, l, h](Precision p, Rng& rng) {
            return with_scalar(p, [&]<class S>() { return two_matrix_head<S>(*d, l, h, rng); });
          });
          continue;
        }
        for (const bool qk : {true, false})
          add(base, head + (qk ? " pair=QK" : " pair=VO"), [d, l, h, qk](Precision p, Rng& rng) {
            return with_scalar(p, [&]<class S>() { return head_reparametrization<S>(*d, l, h, qk, rng); });
          });
      }
    }
  }

  void value_residual(const Claim& base) {
    const auto& d = data;
    for (int n = 1; n < config().layers; ++n)
      add(base, at(n), [d, n](Precision p, Rng& rng) {
        return with_scalar(p, [&]<class S>() { return value_residual_average<S>(*d, n, rng); });
      });
  }

  void norms(const Claim& base) {
    const auto& d = data;
    const auto check = [id = base.id](const CheckpointData& cd, int l, NormSite site, Precision p, Rng& rng) {
      return with_scalar(p, [&]<class S>() {
        if (id == "qwe.lemma8.2") return norm_semi_conjugacy<S>(cd, l, site, rng);
        if (id == "qwe.thm8.3") return norm_change_of_basis<S>(cd, l, site, rng);
        return rms_norm_semi_conjugacy<S>(cd, l, site, rng);
      });
    };
    auto site = [&](int l, NormSite s, const std::string& name) {
      add(base, name, [d, l, s, check](Precision p, Rng& rng) { return check(*d, l, s, p, rng); });
    };
    // qwe.thm8.3 carries the change of basis into the maps that read the norm's output: at ln_1, the
    // layer's own W_Q, W_K, W_V, which a variant or a Q-identity layer does not have (named as skipped).
    const std::string attention_reason = attention_inapplicable(config());
    std::string without_readers;
    for (int l = 0; l < config().layers; ++l) {
      if (base.id != "qwe.thm8.3" || (attention_reason.empty() && !config().identity_query(l)))
        site(l, NormSite::attention, at(l) + " norm=ln_1");
      else
        without_readers += (without_readers.empty() ? "" : ", ") + std::to_string(l + 1);
      site(l, NormSite::mlp, at(l) + " norm=ln_2");
    }
    site(config().layers, NormSite::final, "norm=ln_f");
    if (!without_readers.empty())
      out.skipped.push_back({base.id, "norm=ln_1 of layers " + without_readers + ": " +
                                          (attention_reason.empty() ? "W_Q = I there (q-identity, `lm eliminate`)" : attention_reason) +
                                          "; its change of basis is carried into the layer's W_Q, W_K, W_V"});
  }
};

}  // namespace

CheckpointPlan plan_checkpoint(std::shared_ptr<const CheckpointData> data, const std::vector<const Claim*>& selected) {
  CheckpointPlan out;
  Builder b{data, out};
  const lm::Config& c = data->weights.config;
  const std::string attention_reason = attention_inapplicable(c);
  const bool layer_norm = c.family == lm::Family::gpt2;
  for (const Claim* claim : selected) {
    const std::string& id = claim->id;
    const std::size_t before = out.plan.configurations.size();
    if (id == "qwe.lemma3.1" || id == "qwe.prop4.1" || id == "qwe.prop4.2" || id == "qwe.freedom.vo") {
      if (attention_reason.empty()) b.attention(*claim);
      else out.skipped.push_back({id, id == "qwe.freedom.vo" ? not_applicable(id, c) : attention_reason});
      if (attention_reason.empty() && !c.q_identity_layers.empty())
        out.skipped.push_back({id, "on layers " + identity_query_layers(c) +
                                       ": W_Q = I there (q-identity, `lm eliminate`); the checkpoint forms read a layer's W_Q"});
    } else if (id == "resformer.eq4" && attention_reason.empty() && c.q_identity_layers.empty() && c.layers > 1) {
      b.value_residual(*claim);
    } else if (c.norm && (((id == "qwe.lemma8.2" || id == "qwe.thm8.3") && layer_norm) || (id == "qwe.remark5" && !layer_norm))) {
      b.norms(*claim);
    } else {
      out.skipped.push_back({id, not_applicable(id, c)});
    }
    if (out.plan.configurations.size() > before) out.run.push_back(id);
  }
  return out;
}

results::Value checkpoint_value(const ModelWeights& w) {
  results::Value v = results::Value::object();
  v.set("path", w.dir.string());
  v.set("format", w.format);
  v.set("family", lm::to_string(w.config.family));
  v.set("norm", family_norm(w.config));
  v.set("rope", w.config.rope());
  v.set("config", lm::config_value(w.config));
  return v;
}

results::Report verify_checkpoint(const std::filesystem::path& dir, const ModelWeights& weights,
                                  const lm::TokenSequences& tokens, results::Value tokens_value,
                                  const std::vector<const theory::Claim*>& selected, const theory::VerifyOptions& options) {
  const CheckpointPlan plan = plan_checkpoint(
      std::make_shared<const CheckpointData>(CheckpointData{weights, record_activations(dir, tokens, options.threads)}),
      selected);
  results::Report report = theory::verify(plan.plan, options);
  report.context.set("checkpoint", checkpoint_value(weights));
  report.context.set("tokens", std::move(tokens_value));
  report.context.set("claims_run", results::Value::array_of(plan.run));
  report.skipped.insert(report.skipped.end(), plan.skipped.begin(), plan.skipped.end());
  return report;
}

}  // namespace qkvlab::theory_lm
