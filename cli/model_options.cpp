#include "cli/model_options.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "cli/validators.hpp"
#include "core/errors.hpp"

namespace qkvlab::cli {

void add_model_options(CLI::App* cmd, ModelOptions& o) {
  o.app = cmd;
  auto* g = cmd;
  g->add_option("--family", o.family, "Model family: gpt2 (LayerNorm, GELU, learned positions unless --positions rope) or llama "
                                      "(RMSNorm, SwiGLU, RoPE)")
      ->check(CLI::IsMember({"gpt2", "llama"}))
      ->capture_default_str();
  g->add_option("--variant", o.variant, "Architecture variant (docs/lm.md)")
      ->check(CLI::IsMember({"vanilla", "resformer", "svformer", "neutreno", "denseformer", "skipv1", "yoco-v",
                             "cla-v", "skipkv1", "skipv1-yoco", "q-identity", "resformer-neutreno", "resformer-k",
                             "resformer-q", "resformer-previous", "resformer-all", "resformer-identity", "cla-k",
                             "cla-kv", "resformer-cross"}))
      ->capture_default_str();
  g->add_option("--layers", o.layers, "Number of blocks L")->check(integer_in(1, 1024))->capture_default_str();
  g->add_option("--d", o.d, "Model width d")->check(integer_in(1, 65536))->capture_default_str();
  g->add_option("--heads", o.heads, "Query heads H")->check(integer_in(1, 1024))->capture_default_str();
  g->add_option("--kv-heads", o.kv_heads, "Key/value heads (GQA); default H")->check(integer_in(1, 1024));
  g->add_option("--head-dim", o.head_dim, "Head width d_h; default d/H")->check(integer_in(1, 4096));
  g->add_option("--ffn", o.ffn, "MLP hidden width r; default 4d (gpt2) or 8d/3 rounded up to 32 (llama)")
      ->check(integer_in(1, 1 << 20));
  g->add_option("--mlp-ratio", o.mlp_ratio, "MLP hidden width as a multiple of d (e.g. 4.5: Q-identity's "
                                            "reallocated parameters); excludes --ffn")
      ->check(real_in(0.001, 1024.0));
  g->add_option("--vocab", o.vocab, "Vocabulary size V")->check(integer_in(1, 1 << 24))->capture_default_str();
  g->add_option("--positions", o.positions, "Longest sequence N, how positions enter (learned: gpt2's table; rope: "
                                           "llama's, and dense_skip's GPT-2), or both: 2048, rope, rope,2048")
      ->check(CLI::Validator(
          [](std::string& value) {
            try {
              parse_positions(value);
              return std::string();
            } catch (const UsageError& e) {
              return std::string(e.what());
            }
          },
          "N|learned|rope[,N]"))
      ->capture_default_str();
  g->add_flag("--tied", o.tied, "Tie the head to the token embedding (U = E^T)");
  g->add_flag("--bias", o.bias, "Biases on linear maps (and LayerNorm, gpt2), but none on MLA's latent and rotary "
                                "projections (dkv, uk, uv, kr, qr; q and o have theirs)");
  g->add_option("--gelu", o.gelu, "GELU form (gpt2): tanh (Hugging Face's gelu_new) or erf (exact)")
      ->check(CLI::IsMember({"tanh", "erf"}))
      ->capture_default_str();
  g->add_option("--norm", o.norm, "Norm in front of attention and MLP and before the head: the family's "
                                  "(layernorm for gpt2, rmsnorm for llama) or none (Query-weight elimination's "
                                  "LayerNorm-free setting)")
      ->check(CLI::IsMember({"layernorm", "rmsnorm", "none"}));
  g->add_option("--norm-eps", o.norm_eps, "Norm epsilon; default 1e-5 (gpt2), 1e-6 (llama)")
      ->check(real_in(1e-30, 1.0));
  g->add_option("--rope-theta", o.rope_theta, "RoPE base (llama, and gpt2 with --positions rope)")->check(real_in(1.0, 1e12))->capture_default_str();
  g->add_flag("--mla", o.mla, "Multi-head latent attention (cache a latent of width --d-c and a rotary key --d-r)");
  g->add_option("--d-c", o.d_c, "MLA latent width d_c")->check(integer_in(0, 65536));
  g->add_option("--d-r", o.d_r, "MLA decoupled rotary key width d_R")->check(integer_in(0, 4096));
  g->add_option("--lambda", o.lambda, "resformer, resformer-k, -q, -previous: V_n + lambda V_k (alpha = 1, "
                                      "beta = lambda); neutreno: its lambda (default 0.4); resformer-neutreno: "
                                      "NeuTRENO's lambda (default 0.2, the released value)")
      ->check(real_in(-1e6, 1e6));
  g->add_option("--alpha", o.alpha, "resformer family: alpha in alpha V_n + beta V_k (default 0.5)")
      ->check(real_in(-1e6, 1e6));
  g->add_option("--beta", o.beta, "resformer family: beta in alpha V_n + beta V_k (default 0.5)")
      ->check(real_in(-1e6, 1e6));
  g->add_option("--skip-ratio", o.skip_ratio, "skipv1 family: share of value heads taken from the source layer")
      ->check(real_in(0.0, 1.0))
      ->capture_default_str();
  g->add_option("--source-layer", o.source_layer, "skipv1 family: the source layer k (SkipVk; 0: SkipV0); resformer, "
                                                  "resformer-neutreno, -k, -q: the layer k whose values (keys, "
                                                  "queries) layers > k mix in; resformer-cross: the layer k whose "
                                                  "keys and values layers > k also attend over (default 1)")
      ->check(integer_in(0, 1024))
      ->capture_default_str();
  g->add_option("--strategy", o.strategy, "skipv1: how injected heads are filled")
      ->check(CLI::IsMember({"second-half", "pooling", "dynamic", "odd-even", "plus-resformer"}))
      ->capture_default_str();
}

PositionsFlag parse_positions(const std::string& value) {
  PositionsFlag p;
  std::size_t at = 0;
  do {
    const std::size_t comma = std::min(value.find(',', at), value.size());
    std::string item = value.substr(at, comma - at);
    const bool number = !item.empty() && std::isdigit(static_cast<unsigned char>(item[0]));
    if ((number && p.count) || (!number && p.encoding))
      throw UsageError("'" + value + "': give at most one length and one of learned|rope");
    if (number) {
      if (const std::string why = integer_message(item, 1, 1 << 20, "an integer from 1 to 1048576"); !why.empty())
        throw UsageError("the length " + why);
      p.count = std::stoi(item);
    } else {
      p.encoding = lm::parse_position_encoding(item);
    }
    at = comma + 1;
  } while (at <= value.size());
  return p;
}

namespace {

// Flags of a part the model does not have (lm::unread_fields) are refused, as --alpha, --beta and
// --lambda are (lm::set_variant_weights): given to another variant they would be recorded in its
// config, change nothing, and set its runs apart from their replicates in lm compare.
void refuse_inapplicable(const lm::Config& c, const ModelOptions& o) {
  for (const lm::UnreadField& field : lm::unread_fields(c))
    if (o.app && o.app->count(field.flag) > 0) throw UsageError(field.flag + field.refusal);
}

// Applies the flags for which given(flag) holds to c (sizes first, then what depends on them).
template <class Given>
lm::Config apply(lm::Config c, const ModelOptions& o, Given given) {
  const PositionsFlag positions = given("--positions") ? parse_positions(o.positions) : PositionsFlag{};
  if (given("--family") || given("--layers") || given("--d") || given("--heads") || given("--vocab") ||
      positions.count) {
    const lm::Config d = lm::family_defaults(given("--family") ? lm::parse_family(o.family) : c.family,
                                             given("--layers") ? o.layers : c.layers, given("--d") ? o.d : c.d,
                                             given("--heads") ? o.heads : c.heads, given("--vocab") ? o.vocab : c.vocab,
                                             positions.count.value_or(c.positions));
    const bool sizes = given("--family") || given("--d") || given("--heads");
    c.family = d.family, c.layers = d.layers, c.d = d.d, c.vocab = d.vocab, c.positions = d.positions;
    if (sizes) c.heads = d.heads, c.kv_heads = d.kv_heads, c.head_dim = d.head_dim, c.ffn = d.ffn, c.norm_eps = d.norm_eps;
    if (given("--family"))  // the family's head, biases and positions, then --tied/--bias/--positions
      c.tied = d.tied, c.bias = d.bias, c.position_encoding = d.position_encoding;
  }
  if (given("--tied")) c.tied = o.tied;
  if (given("--bias")) c.bias = o.bias;
  if (o.kv_heads && given("--kv-heads")) c.kv_heads = *o.kv_heads;
  if (o.head_dim && given("--head-dim")) c.head_dim = *o.head_dim;
  if (c.head_dim < 1) throw UsageError("--heads " + std::to_string(c.heads) + " is larger than --d " + std::to_string(c.d));
  if ((given("--d") || given("--heads")) && !(o.head_dim && given("--head-dim")) && c.d % c.heads != 0)
    throw UsageError("--d " + std::to_string(c.d) + " is not a multiple of --heads " + std::to_string(c.heads) +
                     ": give the head width with --head-dim (d/H rounded down would be " + std::to_string(c.head_dim) + ")");
  if (o.ffn && o.mlp_ratio) throw UsageError("--ffn and --mlp-ratio both set the MLP width: give one");
  if (o.ffn && given("--ffn")) c.ffn = *o.ffn;
  if (o.mlp_ratio && given("--mlp-ratio")) c.ffn = int(std::lround(*o.mlp_ratio * c.d));
  if (given("--gelu")) c.gelu = o.gelu == "erf" ? lm::GeluForm::erf : lm::GeluForm::tanh;
  if (o.norm_eps && given("--norm-eps")) c.norm_eps = *o.norm_eps;
  if (!o.norm.empty() && given("--norm")) c.norm = lm::parse_norm(c.family, o.norm);
  if (positions.encoding) c.position_encoding = *positions.encoding;
  if (given("--rope-theta")) c.rope_theta = o.rope_theta;
  if (given("--mla")) c.mla = o.mla;
  if (given("--d-c")) c.d_c = o.d_c;
  if (given("--d-r")) c.d_r = o.d_r;
  lm::Variant& v = c.variant;
  if (given("--variant")) v.kind = lm::parse_variant(o.variant);
  if (given("--strategy")) v.strategy = lm::parse_strategy(o.strategy);
  if (given("--skip-ratio")) v.skip_ratio = o.skip_ratio;
  if (given("--source-layer")) v.source_layer = o.source_layer;
  lm::set_variant_weights(v, {o.lambda, o.alpha, o.beta}, given("--variant"));
  refuse_inapplicable(c, o);
  lm::validate(c);
  return c;
}

}  // namespace

lm::Config model_config(const ModelOptions& o) {
  lm::Config base = lm::family_defaults(lm::parse_family(o.family), o.layers, o.d, o.heads, o.vocab,
                                        parse_positions(o.positions).count.value_or(1024));
  return apply(base, o, [](const char*) { return true; });
}

lm::Config model_config(const lm::Config& base, const ModelOptions& o, const CLI::App& cmd) {
  return apply(base, o, [&cmd](const char* flag) { return cmd.count(flag) > 0; });
}

}  // namespace qkvlab::cli
