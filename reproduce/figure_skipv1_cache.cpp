// skipv1-fig6c-7: SkipV1Former Fig. 6 (KV cache per token), Fig. 7 (prefill and decode throughput)
// and Table 2's variants, measured by decoding (lm/generate.hpp) with freshly initialized models of
// the tiny preset's shape: the cache's bytes and the throughput do not depend on the weights, so
// nothing is trained. Each variant's cache is measured from the allocation (Model::cache_bytes)
// and set beside lm/accounting's count; the timed variants decode greedily after a prompt that
// fills the cache to each context, at each batch, the variants timed back to back within each
// repeat so that the machine's load falls on all of them alike (the repeats are the replicates of
// the verdict's throughput ratios).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include "core/errors.hpp"
#include "core/statistics.hpp"
#include "lm/accounting.hpp"
#include "lm/generate.hpp"
#include "lm/model.hpp"
#include "lm/train.hpp"
#include "reproduce/figure_output.hpp"

namespace qkvlab::reproduce {

using results::Column;
using results::Table;
using results::Value;

namespace {

struct CacheVariant {
  std::string name, base;  // base: the variant its saving is measured against ("" for none)
  lm::Config config;
  bool timed;
};

// The tiny preset's shape (GPT-2, L = 6, d = 128, H = 4, V = 4096) with 1024 positions (the preset
// trains on 128); MLA with the llama family (RoPE, the rotary key), d_c = 64, d_R = 16; GQA with 2
// key/value heads.
std::vector<CacheVariant> cache_variants() {
  lm::Config tiny = lm::find_preset("tiny").options.model;
  tiny.positions = 1024;
  auto with = [&](lm::VariantKind kind, lm::Config c) {
    c.variant.kind = kind;
    return c;
  };
  lm::Config gqa = tiny;
  gqa.kv_heads = 2;
  lm::Config mla = lm::family_defaults(lm::Family::llama, tiny.layers, tiny.d, tiny.heads, tiny.vocab, tiny.positions);
  mla.mla = true, mla.d_c = 64, mla.d_r = 16;
  using K = lm::VariantKind;
  return {{"vanilla", "", tiny, true},
          {"skipv1", "vanilla", with(K::skipv1, tiny), true},
          {"svformer", "vanilla", with(K::svformer, tiny), true},
          {"yoco-v", "vanilla", with(K::yoco_v, tiny), false},
          {"cla-v", "vanilla", with(K::cla_v, tiny), false},
          {"skipv1-yoco", "vanilla", with(K::skipv1_yoco, tiny), false},
          {"gqa", "vanilla", gqa, false},
          {"gqa+skipv1", "gqa", with(K::skipv1, gqa), false},
          {"mla", "vanilla", mla, true},
          {"mla+skipv1", "mla", with(K::skipv1, mla), true}};
}

// The cache's bytes per token as allocated for B = 1 and `capacity` positions.
double measured_bytes_per_token(lm::Model<float>& model, int capacity) {
  model.begin_cache(1, capacity, 1);
  return double(model.cache_bytes()) / double(capacity);
}

struct Plan {
  std::vector<int> contexts, batches;
  int new_tokens, repeats;
};
// The default: contexts 256 … the positions, batches 1 and 8 (Fig. 7's B = 8), 3 repeats; with
// --steps N (the quick runs of the tests) short contexts, N new tokens and 2 repeats.
Plan plan(const Options& o, int positions) {
  if (o.steps > 0) return {{32, 64}, {1, 8}, int(std::min<std::int64_t>(o.steps, 8)) + 1, 2};
  return {{256, positions / 2, positions}, {1, 8}, 32, 3};
}

}  // namespace

void skipv1_fig6c_7(const Options& options, engine::Backend<float>& backend, Output& out, const ProgressFn& progress) {
  const std::vector<CacheVariant> variants = cache_variants();
  std::vector<std::unique_ptr<lm::Model<float>>> models;
  for (const CacheVariant& v : variants) {
    lm::validate(v.config);
    models.push_back(std::make_unique<lm::Model<float>>(v.config, backend));
    models.back()->initialize(options.seed);
  }
  const Plan p = plan(options, variants.front().config.positions);

  // The cache: measured from the allocation, against the count (f32: 4 bytes an element).
  Table cache{"cache_bytes", {{"index", {}}, {"measured", {}}, {"counted", {}}}};
  Value list = Value::array();
  out.notes += "| variant | KV bytes/token measured | counted (qkvlab kv) | saving vs | parameters |\n|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const CacheVariant& v = variants[i];
    const double measured = measured_bytes_per_token(*models[i], p.contexts.back());
    const std::int64_t counted = 4 * lm::count_kv(v.config).elements_per_token();
    cache.columns[0].values.push_back(double(i)), cache.columns[1].values.push_back(measured);
    cache.columns[2].values.push_back(double(counted));
    Value row = Value::object();
    row.set("variant", v.name), row.set("base", v.base), row.set("layers", v.config.layers);
    row.set("parameters", lm::count_parameters(v.config).total);
    row.set("cache_bytes_per_token_measured", measured), row.set("cache_bytes_per_token_counted", counted);
    list.push(row);
    std::string saving = "—";
    for (std::size_t j = 0; j < i; ++j)
      if (variants[j].name == v.base)
        saving = fixed(100 * (1 - measured / cache.columns[1].values[j]), 1) + "% vs " + v.base;
    out.notes += "| " + v.name + " | " + fixed(measured, 0) + " | " + std::to_string(counted) + " | " + saving + " | " +
                 std::to_string(lm::count_parameters(v.config).total) + " |\n";
  }
  out.value.set("variants", list);
  std::string tics;
  for (std::size_t i = 0; i < variants.size(); ++i) tics += (i ? ", \"" : "\"") + variants[i].name + "\" " + std::to_string(i);
  out.draw({"KV-cache bytes per token (f32), measured from the allocation", "", "bytes per token", false, false,
            {{"index", "measured", "", "measured", "boxes fs solid 0.5", ""}, {"index", "counted", "", "qkvlab kv", "points pt 7", ""}},
            {"set boxwidth 0.6", "set xtics rotate by -30 (" + tics + ")", "set yrange [0:*]", "set key top right"}},
           out.add(cache), "cache_bytes");

  // The throughput: each repeat times every timed variant at each context and batch, back to back.
  Value timings = Value::array();
  std::map<std::string, std::map<std::pair<int, int>, std::pair<std::vector<double>, std::vector<double>>>> rates;
  const std::int64_t total = std::int64_t(p.repeats * p.contexts.size() * p.batches.size()) *
                             std::count_if(variants.begin(), variants.end(), [](const CacheVariant& v) { return v.timed; });
  std::int64_t done = 0;
  for (int r = 0; r < p.repeats; ++r)
    for (int context : p.contexts)
      for (int B : p.batches) {
        std::vector<std::int32_t> prompt(std::size_t(context - p.new_tokens + 1));
        for (std::size_t t = 0; t < prompt.size(); ++t) prompt[t] = std::int32_t((7 * t + 3) % std::size_t(variants[0].config.vocab));
        for (std::size_t i = 0; i < variants.size(); ++i) {
          if (!variants[i].timed) continue;
          const lm::Generation g = lm::generate(*models[i], prompt, p.new_tokens, B, lm::Sampling{});
          if (!g.nonfinite.empty()) throw NumericalError(variants[i].name + ": " + g.nonfinite);  // no rate of a stopped run
          auto& [prefill, decode] = rates[variants[i].name][{context, B}];
          prefill.push_back(double(B) * double(prompt.size()) / g.prefill_seconds);
          decode.push_back(double(B) * double(g.decode_steps) / g.decode_seconds);
          if (progress) progress("decode", "runs", ++done, total, variants[i].name + ", context " + std::to_string(context) + ", batch " + std::to_string(B));
        }
      }
  Table t{"decode", {{"context", {}}}};
  results::Figure f{"Decode throughput against context (" + std::to_string(p.repeats) + " repeats, mean)", "context",
                    "tokens per second", true, true, {}, {"set key outside right"}};
  for (int context : p.contexts) t.columns[0].values.push_back(context);
  out.notes += "\nDecode tokens/s (mean ± se over " + std::to_string(p.repeats) + " repeats; prefill tokens/s):\n\n";
  for (const auto& [name, cells] : rates)
    for (int B : p.batches) {
      Column col{name + "_b" + std::to_string(B), {}};
      for (int context : p.contexts) {
        const auto& [prefill, decode] = cells.at({context, B});
        const Summary d = summarize(decode), q = summarize(prefill);
        col.values.push_back(d.value);
        Value row = Value::object();
        row.set("variant", name), row.set("context", context), row.set("batch", B);
        row.set("prefill_tokens_per_s", Value::array_of(prefill)), row.set("decode_tokens_per_s", Value::array_of(decode));
        timings.push(row);
        out.notes += "- " + name + ", context " + std::to_string(context) + ", batch " + std::to_string(B) + ": decode " +
                     fixed(d.value, 1) + " ± " + fixed(d.se, 1) + ", prefill " + fixed(q.value, 0) + " ± " + fixed(q.se, 0) + "\n";
      }
      f.series.push_back({"context", col.name, "", name + ", B = " + std::to_string(B), "linespoints", ""});
      t.columns.push_back(std::move(col));
    }
  out.value.set("new_tokens", p.new_tokens), out.value.set("repeats", p.repeats);
  out.value.set("timings", timings);
  out.draw(f, out.add(t), "decode");
}

}  // namespace qkvlab::reproduce
