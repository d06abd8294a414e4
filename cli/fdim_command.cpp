// `qkvlab fdim`: the functional dimension of a small attention network (fdim/count.hpp):
// the rank of the Jacobian of parameters ↦ outputs at a random point, the deficiency against the
// theory's gauges, and a certificate of both bounds.
#include "cli/fdim_command.hpp"

#include "cli/format_option.hpp"
#include "cli/plot_common.hpp"
#include "cli/threads_option.hpp"
#include "cli/validators.hpp"
#include "fdim/count.hpp"

#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace qkvlab::cli {

namespace {

struct FdimArgs {
  fdim::Network config;
  std::string skips = "both", norm = "none", mlp = "none", embed = "none", readout = "none";
  std::string mixer = "attention", skip_kind = "identity";
  std::set<std::string> given;  // the options of refuse_unused given on the command line
  std::string query = "free", format = "table";
  std::vector<int> query_layers;
  bool no_certify = false, quiet = false;
};

template <class E> E named(const std::map<std::string, E>& m, const std::string& name) { return m.at(name); }

// An option the network would not use is refused, not ignored (the report would echo a network it
// did not count): a size of an end or part that is absent (the MLP's width without a block, the heads
// without attention), a block's part without blocks (--layers 0: the MLP, the skips, the biases and
// the norm where no end has them), --causal without attention, W_Q = I where there is no W_Q.
void refuse_unused(const FdimArgs& a) {
  using namespace fdim;
  const Network& c = a.config;
  const auto need = [&](const char* option, bool used, const std::string& what) {
    if (a.given.count(option) && !used) throw UsageError(std::string(option) + " needs " + what);
  };
  need("--skip-rank", c.skip_kind == SkipKind::lowrank, "--skip-kind lowrank");
  need("--norm-eps", c.norm == Norm::layernorm || c.norm == Norm::rmsnorm, "--norm layernorm or rmsnorm");
  need("--vocab", c.embed == Embed::tokens, "--embed tokens");
  need("--din", c.embed == Embed::linear, "--embed linear");
  need("--dout", c.readout == Readout::linear, "--readout linear");
  need("--ffn", c.mlp != Mlp::none && c.layers > 0, "an --mlp in a block (--layers >= 1)");
  const bool attention = c.mixer == Mixer::attention && c.layers > 0;
  need("--heads", attention, "attention (--mixer attention, --layers >= 1)");
  need("--head-dim", attention, "attention (--mixer attention, --layers >= 1)");
  if (c.causal && !attention) throw UsageError("--causal needs attention (--mixer attention, --layers >= 1): nothing else mixes positions");
  if (a.query == "identity" && !attention)
    throw UsageError("--query identity needs attention (--mixer attention, --layers >= 1): there is no W_Q");
  const bool blocks = c.layers > 0, final_norm = c.readout != Readout::none;
  const std::string a_block = "a block (--layers >= 1)";
  for (const char* option : {"--mixer", "--mlp", "--skips", "--skip-kind"}) need(option, blocks, a_block);
  for (const char* option : {"--norm", "--norm-gain", "--norm-bias"})
    need(option, blocks || final_norm, a_block + " or a readout (its final norm)");
  need("--bias", blocks || c.embed == Embed::linear || c.readout == Readout::linear,
       a_block + ", --embed linear or --readout linear");
}

int run_fdim(FdimArgs a) {
  using namespace fdim;
  Network& c = a.config;
  c.skips = named<Skips>({{"both", Skips::both}, {"attention", Skips::attention}, {"none", Skips::none}}, a.skips);
  c.norm = named<Norm>({{"none", Norm::none}, {"layernorm", Norm::layernorm}, {"rmsnorm", Norm::rmsnorm}, {"dyt", Norm::dyt}},
                       a.norm);
  c.mlp = named<Mlp>({{"none", Mlp::none}, {"relu", Mlp::relu}, {"gelu", Mlp::gelu}, {"tanh", Mlp::tanh},
                      {"relu2", Mlp::relu2}, {"reglu", Mlp::reglu}, {"swiglu", Mlp::swiglu},
                      {"geglu", Mlp::geglu}, {"glu", Mlp::glu}},
                     a.mlp);
  c.mixer = a.mixer == "none" ? Mixer::none : Mixer::attention;
  c.skip_kind = named<SkipKind>({{"identity", SkipKind::identity}, {"learned", SkipKind::learned},
                                 {"units", SkipKind::units}, {"lowrank", SkipKind::lowrank}},
                                a.skip_kind);
  c.embed = named<Embed>({{"tokens", Embed::tokens}, {"linear", Embed::linear}, {"none", Embed::none}}, a.embed);
  c.readout = named<Readout>({{"linear", Readout::linear}, {"tied", Readout::tied}, {"none", Readout::none}}, a.readout);
  refuse_unused(a);
  if (a.query == "identity") {
    if (a.query_layers.empty())
      for (int l = 1; l <= a.config.layers; ++l) a.query_layers.push_back(l);
    a.config.identity_layers = a.query_layers;
  } else if (!a.query_layers.empty()) {
    throw UsageError("--query-layers needs --query identity");
  }
  apply_threads(c.threads, BlasUse::shared);
  const Progress progress{"fdim", Progress::wanted(a.quiet)};
  const fdim::Count n = fdim::count(a.config, !a.no_certify, [&](const std::string& what, long long done, long long total) {
    progress(what, std::size_t(done), std::size_t(total));
  });
  const results::Value v = fdim::count_value(n);
  std::cout << (a.format == "json" ? v.json() : v.text());
  return 0;
}

}  // namespace

Command add_fdim_command(CLI::App& app, const std::string&) {
  auto a = std::make_shared<FdimArgs>();
  fdim::Network& c = a->config;
  auto* cmd = app.add_subcommand("fdim", "Functional dimension of a small attention network: the rank of the Jacobian "
                                         "of parameters -> outputs, its gauges, certified (docs/math/fdim.md)");
  cmd->footer("The rank is read from double's SVD (numpy's tolerance; the gap s_r/s_r+1 is reported) and certified\n"
              "below on an MPFI enclosure A of an r x r minor (nonsingular: ||I - C A|| < 1, C the inverse of its\n"
              "midpoint), above by the theory's gauge directions verified in MPFI and certified independent by the\n"
              "same test; certified: true when the two meet.\n"
              "Exit status: 0 success, 2 usage error (one line on stderr), 3 a numerical failure.");
  auto count = [&](const char* name, int& v, const char* help) {
    return cmd->add_option(name, v, help)->check(positive_integer)->capture_default_str();
  };
  cmd->add_option("--layers", c.layers, "Blocks L (0: the ends alone)")->check(integer_in(0, 64))->capture_default_str();
  count("--d", c.d, "Residual width d");
  auto* heads = count("--heads", c.heads, "Heads H per layer");
  auto* head_dim = count("--head-dim", c.head_dim, "Head dimension d_h");
  count("--seq", c.seq, "Sequence length T");
  count("--inputs", c.inputs, "Random input sequences N (the rank must saturate in N; the report shows it)");
  auto* skips = cmd->add_option("--skips", a->skips, "Skip connections")
      ->check(CLI::IsMember({"both", "attention", "none"}))
      ->capture_default_str();
  auto* skip_kind = cmd->add_option("--skip-kind", a->skip_kind,
                  "What each skip adds: X itself, X A (learned, A d x d), X U V (identity units with trainable U, "
                  "V) or X + X U V (lowrank, U d x r, V r x d); needs --norm none or rmsnorm, no --bias")
      ->check(CLI::IsMember({"identity", "learned", "units", "lowrank"}))
      ->capture_default_str();
  auto* rank = cmd->add_option("--skip-rank", c.skip_rank, "Rank r of --skip-kind lowrank (1 ... d)")
                   ->check(positive_integer)
                   ->capture_default_str();
  auto* norm = cmd->add_option("--norm", a->norm,
                  "Pre-norm in each block (and a final norm before a readout); dyt: gamma * tanh(alpha x) + beta "
                  "with a learned scalar alpha")
      ->check(CLI::IsMember({"none", "layernorm", "rmsnorm", "dyt"}))
      ->capture_default_str();
  auto* eps = cmd->add_option("--norm-eps", c.norm_eps, "The epsilon of LayerNorm and RMSNorm (0: scale-invariant)")
                  ->check(non_negative_real)
                  ->capture_default_str();
  auto* mixer = cmd->add_option("--mixer", a->mixer, "What mixes positions in each block: attention, or none (MLP blocks alone)")
      ->check(CLI::IsMember({"attention", "none"}))
      ->capture_default_str();
  auto* mlp = cmd->add_option("--mlp", a->mlp,
                  "MLP after attention: relu, gelu, tanh, relu2 (ReLU squared), or gated g(gates) * values with g = "
                  "relu (reglu), silu (swiglu), gelu (geglu) or the logistic (glu)")
      ->check(CLI::IsMember({"none", "relu", "gelu", "tanh", "relu2", "reglu", "swiglu", "geglu", "glu"}))
      ->capture_default_str();
  auto* ffn = count("--ffn", c.ffn, "MLP hidden width r (gated: r gates and r values)");
  cmd->add_option("--embed", a->embed, "Input end: token table (--vocab), linear map (--din), or the inputs themselves")
      ->check(CLI::IsMember({"tokens", "linear", "none"}))
      ->capture_default_str();
  auto* vocab = count("--vocab", c.vocab, "Vocabulary size (--embed tokens)");
  auto* din = count("--din", c.din, "Input dimension (--embed linear)");
  cmd->add_flag("--pos-emb", c.pos_emb, "Learned positions P (T x d)");
  cmd->add_option("--readout", a->readout, "Output end: linear map (--dout), tied to the embedding, or the stream")
      ->check(CLI::IsMember({"linear", "tied", "none"}))
      ->capture_default_str();
  auto* dout = count("--dout", c.dout, "Output dimension (--readout linear)");
  auto* bias = cmd->add_flag("--bias", c.bias, "Biases on every linear map");
  auto* norm_gain = cmd->add_flag("--norm-gain", c.norm_gain, "A learned gain in every norm");
  auto* norm_bias = cmd->add_flag("--norm-bias", c.norm_bias, "DyT's learned offset beta in every norm (--norm dyt)");
  cmd->add_flag("--causal", c.causal, "Causal mask on the attention (default: bidirectional; needs attention)");
  cmd->add_option("--query", a->query, "free W_Q, or W_Q = I (q-identity) in --query-layers")
      ->check(CLI::IsMember({"free", "identity"}))
      ->capture_default_str();
  add_list_option(cmd, "--query-layers", a->query_layers, "Layers with W_Q = I, 1 ... L, comma-separated (default: all)",
                  integer_in(1, 64));
  cmd->add_option("--seed", c.seed, "Seed of the point and the inputs")->check(seed_value)->capture_default_str();
  add_threads_option(cmd, c.threads);
  cmd->add_flag("--no-certify", a->no_certify, "Floating-point rank only (no MPFI certificate)");
  add_format_option(cmd, a->format);
  cmd->add_flag("--quiet", a->quiet, "No progress line");
  return {cmd, [a, given = std::vector<CLI::Option*>{eps, rank, vocab, din, dout, ffn, heads, head_dim, mixer, mlp, skips,
                                                     skip_kind, norm, norm_gain, norm_bias, bias}] {
            for (const CLI::Option* o : given)
              if (o->count() > 0) a->given.insert(o->get_name());
            return run_fdim(*a);
          }};
}

}  // namespace qkvlab::cli
