// The one `--dtype` option of every subcommand that runs a forward pass from a
// checkpoint's weights (analyze, lm eval, lm generate): how the model holds its
// matrices (engine/weight_type.hpp, lm/model_files.hpp's weight_type_for), and
// the report's fields that say which type was used and its error model.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "engine/weight_type.hpp"
#include "results/value.hpp"

namespace qkvlab::cli {

inline CLI::Option* add_dtype_option(CLI::App* cmd, std::string& dtype) {
  dtype = "auto";
  return cmd
      ->add_option("--dtype", dtype,
                   "Weights held as: auto (the checkpoint's stored type: bf16 or f16 kept at 2 bytes per weight, "
                   "else f32), f32 (converted to float32), bf16 or f16 (rounded to 16 bits); products accumulate "
                   "in float32 (docs/lm.md, \"Weights in 16 bits\")")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "f16"}))
      ->capture_default_str();
}

// The error of the weights' type against float32 weights, in words.
inline std::string error_model(engine::WeightType t) {
  if (t == engine::WeightType::f32) return "float32 weights, float32 products (the reference)";
  const std::string name = engine::weight_type_name(t), u = t == engine::WeightType::bf16 ? "2^-8" : "2^-11";
  const std::string small = t == engine::WeightType::f16
                                ? " (below 2^-14, f16's subnormals: within 2^-25 absolute; a weight beyond 65504 is refused)"
                                : "";
  return "weights in " + name + ": each within u = " + u + " relative of its float32 value" + small +
         " (exact when stored as " + name + "), widened exactly to float32 for every product, accumulated in float32";
}

// `dtype` and `error_model` in a command's report.
inline void set_dtype_fields(results::Value& v, engine::WeightType t) {
  v.set("dtype", engine::weight_type_name(t));
  v.set("error_model", error_model(t));
}

}  // namespace qkvlab::cli
