#include "runtime/fla_names.h"

#include <algorithm>
#include <cmath>

namespace mnemo {

int64_t FlaConfigView::integer(const std::string& field) const {
  const json& v = config.at(field);
  if (!v.is_number_integer())
    throw Error(where + ": fla config field '" + field + "' must be an integer, got " + json_excerpt(v));
  return v.get<int64_t>();
}

double FlaConfigView::number(const std::string& field) const {
  const json& v = config.at(field);
  if (!v.is_number()) throw Error(where + ": fla config field '" + field + "' must be a number, got " + json_excerpt(v));
  return v.get<double>();
}

bool FlaConfigView::flag(const std::string& field) const {
  const json& v = config.at(field);
  if (!v.is_boolean())
    throw Error(where + ": fla config field '" + field + "' must be true or false, got " + json_excerpt(v));
  return v.get<bool>();
}

void FlaConfigView::refuse(const std::string& what) const {
  throw Error(where + ": cannot import fla " + type + " exactly: " + what);
}

int64_t FlaConfigView::exact_dim(const std::string& field, int64_t d, int64_t heads) const {
  const double total = static_cast<double>(d) * number(field);
  const int64_t n = std::llround(total);
  if (std::abs(total - static_cast<double>(n)) > 1e-9 || n <= 0 || n % heads != 0)
    refuse("hidden_size * " + field + " = " + std::to_string(total) + " is not a positive multiple of num_heads " +
           std::to_string(heads));
  return n;
}

void FlaConfigView::require_norm_eps_1e6() const {
  if (number("norm_eps") != 1e-6)
    refuse("norm_eps " + json_excerpt(config.at("norm_eps")) + " also sets the eps of the mixer's output norm, fixed "
           "at 1e-6 in mnemo");
}

void FlaConfigView::require_heads_divide(int64_t d, int64_t heads) const {
  if (d % heads != 0)
    refuse("hidden_size " + std::to_string(d) + " is not divisible by num_heads " + std::to_string(heads));
}

void FlaConfigView::require_same_kv_heads(const std::string& field, int64_t heads) const {
  if (!is_null(field) && integer(field) != heads)
    refuse(field + " " + json_excerpt(config.at(field)) + " != num_heads " + std::to_string(heads) +
           ": shared key/value heads, mnemo's " + type + " has one per head");
}

void fla_head_layout_keys(const FlaConfigView& c, json& keys, int64_t head_dim, double expand_v) {
  const double dv = static_cast<double>(head_dim) * expand_v;
  if (head_dim <= 0 || dv < 1 || std::abs(dv - std::round(dv)) > 1e-9)
    c.refuse("head_dim * expand_v = " + std::to_string(dv) + " is not a positive integer");
  const int64_t d = keys.at("d_model"), H = keys.at("n_heads");
  int64_t n_heads = std::min(H, d);  // the skeleton's n_heads must divide d_model; these mixers use num_heads
  while (d % n_heads != 0) --n_heads;
  keys["n_heads"] = n_heads;
  keys["num_heads"] = H;
  keys["head_dim"] = head_dim;
  keys["expand_v"] = expand_v;
  keys["conv_size"] = c.integer("conv_size");
  keys["use_short_conv"] = c.flag("use_short_conv");
}

void fla_mamba_head_keys(const FlaConfigView& c, json& keys) {
  const int64_t d = keys.at("d_model");
  const double expand = c.number("expand");
  const double inner = expand * static_cast<double>(d);
  const int64_t P = c.integer("head_dim");
  if (P <= 0 || std::abs(inner - std::round(inner)) > 1e-9 || static_cast<int64_t>(std::round(inner)) % P != 0)
    c.refuse("expand * hidden_size = " + std::to_string(inner) + " is not a multiple of head_dim " + std::to_string(P));
  const int64_t H = static_cast<int64_t>(std::round(inner)) / P;
  if (!c.is_null("num_heads") && c.integer("num_heads") != 0 && c.integer("num_heads") != H)
    c.refuse("num_heads " + std::to_string(c.integer("num_heads")) + " is not expand * hidden_size / head_dim = " +
             std::to_string(H));
  keys["block_mlp"] = false;
  keys["mamba_expand"] = expand;
  keys["mamba_head_dim"] = P;
  keys["mamba_d_state"] = c.integer("state_size");
  keys["mamba_ngroups"] = c.integer("n_groups");
  int64_t n_heads = std::min(H, d);  // the skeleton's n_heads must divide d_model; the layer uses its own heads
  while (d % n_heads != 0) --n_heads;
  keys["n_heads"] = n_heads;
}

void fla_check_mamba2_layer(const FlaConfigView& c) {
  if (!c.flag("rmsnorm")) c.refuse("rmsnorm false: mnemo's Mamba2-style output always has the gated RMSNorm");
  if (c.flag("norm_before_gate")) c.refuse("norm_before_gate: mnemo gates, then normalises");
  if (c.flag("D_has_hdim")) c.refuse("D_has_hdim: mnemo's skip D is one scalar per head");
  if (c.config.at("hidden_act") != "silu" && c.config.at("hidden_act") != "swish")
    c.refuse("hidden_act " + json_excerpt(c.config.at("hidden_act")) + ": mnemo's conv activation is SiLU");
  // (0, inf): transformers writes inf as {"__float__": "Infinity"}, Python's json as Infinity (read as null here).
  const json& limit = c.config.at("dt_limit");
  auto infinite = [](const json& v) {
    return v.is_null() || (v.is_number() && std::isinf(v.get<double>()) && v.get<double>() > 0) ||
           (v.is_object() && v.value("__float__", "") == "Infinity");
  };
  const bool open_limit = limit.is_array() && limit.size() == 2 && limit[0].is_number() &&
                          limit[0].get<double>() <= 0 && infinite(limit[1]);
  if (!open_limit) c.refuse("dt_limit " + json_excerpt(limit) + ": mnemo does not clamp dt");
}

void fla_map_qkv_projections(const json& keys, const FlaLayerPrefixes& at, FlaKeyMap& map) {
  const bool conv = keys.at("use_short_conv").get<bool>();
  for (const std::string p : {"q", "k", "v"}) {
    map[at.mnemo + p + "_proj.proj.weight"] = {{at.fla + p + "_proj.weight"}};
    if (conv) map[at.mnemo + p + "_proj.conv.weight"] = {{at.fla + p + "_conv1d.weight"}};
  }
}

}  // namespace mnemo
