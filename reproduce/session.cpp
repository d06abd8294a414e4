// A figure's run (figure_kit.hpp: Session) and the small renderings the figure files share.
#include <cstdio>
#include <cmath>

#include "lm/model_files.hpp"
#include "reproduce/figure_kit.hpp"

namespace qkvlab::reproduce {

Session::Session(const Context& c) : c_(c), backend_(c.backend()), seed_(c.options.seed) {}

const lm::TrainData& Session::data() {
  if (!data_) data_ = lm::brown_data(c_.options.data);
  return *data_;
}

const Trained& Session::trained(const std::string& name) {
  const std::string key = seed_ == c_.options.seed ? name : name + "-s" + std::to_string(seed_);
  auto it = trained_.find(key);
  if (it == trained_.end())
    it = trained_.emplace(key, Used{name, seed_, train_or_reuse(c_, recipe(name, seed_, c_.options.steps), data())}).first;
  return it->second.trained;
}

std::unique_ptr<lm::Model<float>> Session::model(const std::string& name) { return lm::load_model(checkpoint(name), *backend_); }

lm::TokenSequences Session::sequences(int T) {
  const std::vector<std::int32_t>& v = data().validation;
  lm::TokenSequences chosen = analysis::choose_sequences(lm::token_sequences(v, std::int64_t(v.size()), 0, T, 0),
                                                         c_.options.sequences, c_.options.seed);
  analysed_[T] = chosen.sequences;  // all there are when fewer than asked
  return chosen;
}

Value Session::sequences_analysed() const {
  Value v = Value::array();
  for (const auto& [T, n] : analysed_) {
    Value one = Value::object();
    one.set("length", std::int64_t(T));
    one.set("sequences", n);
    v.push(one);
  }
  return v;
}

analysis::Report Session::analyze(const std::string& name, analysis::Kind kind, analysis::Options o, int T) {
  o.threads = c_.options.threads;
  auto m = model(name);
  const auto data = sequences(T);
  return analysis::analyze(*m, kind, data, o, [&](std::int64_t done, std::int64_t total) {
    progress("analyze " + name + " (" + analysis::to_string(kind) + ", T = " + std::to_string(T) + ")", "sequences",
             done, total);
  });
}

Value Session::runs() const {
  Value v = Value::object();
  for (const auto& [key, used] : trained_) {
    const Trained& t = used.trained;
    Value r = Value::object();
    r.set("dir", t.dir.string());
    r.set("reused", t.reused);
    r.set("recipe", "qkvlab lm train --preset tiny " + recipe(used.recipe, used.seed, c_.options.steps).flags +
                        " --seed " + std::to_string(used.seed) +
                        (c_.options.steps > 0 ? " --steps " + std::to_string(c_.options.steps) : ""));
    r.set("final_validation_loss", t.run["final_validation_loss"]);
    r.set("seconds", t.run["seconds"]);
    // Where the run was trained (its run.json's, not this session's backend: a reused entry may be
    // another process's) and by which qkvlab (null for an entry trained before run.json recorded it).
    for (const char* key : {"device", "qkvlab_version"}) r.set(key, t.run.find(key) ? *t.run.find(key) : Value());
    v.set(key, r);
  }
  return v;
}

std::string fixed(double x, int digits) {  // every digit of a large x (%.*f of 1e40 has 41 before the point)
  std::string out(std::size_t(std::snprintf(nullptr, 0, "%.*f", digits, x)), '\0');
  std::snprintf(out.data(), out.size() + 1, "%.*f", digits, x);
  return out;
}

std::string list_text(const std::vector<double>& x, int digits) {
  std::string s;
  for (double v : x) {
    if (!s.empty()) s += ' ';
    s += fixed(v, digits);
  }
  return s;
}

double mean_of(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return x.empty() ? std::nan("") : s / double(x.size());
}

}  // namespace qkvlab::reproduce
