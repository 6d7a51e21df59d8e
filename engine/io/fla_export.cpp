#include "engine/io/fla_export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/file_tree.h"
#include "engine/config/run_config.h"
#include "engine/io/checkpoint.h"
#include "engine/io/fla_import.h"
#include "engine/io/safetensors.h"
#include "runtime/layers.h"
#include "runtime/registry.h"

namespace mnemo {
namespace fs = std::filesystem;

namespace {

// The model's keys as the importer derives them: the skeleton's fields and the (uniform) mixer arguments, with an
// automatic head layout (num_heads = head_dim = 0, runtime/delta_rule/mixer.cpp) written out as the mixer resolves it.
json mnemo_view(const ModelConfig& mc) {
  json view = mc.layer_args(0);
  if (view.contains("num_heads") && view.contains("head_dim") && view["num_heads"].is_number_integer() &&
      view["head_dim"].is_number_integer()) {
    int64_t heads = view["num_heads"].get<int64_t>(), d_k = view["head_dim"].get<int64_t>();
    if (mc.model == "gated_deltanet" && heads == 0 && d_k == 0 && mc.d_model >= 1024) {
      d_k = 256;
      heads = std::max<int64_t>(1, (3 * mc.d_model / 4) / 256);
    }
    if (heads == 0) heads = mc.n_heads;
    if (d_k == 0 && heads > 0) d_k = mc.d_model / heads;
    view["num_heads"] = heads;
    view["head_dim"] = d_k;
  }
  view["d_model"] = mc.d_model;
  view["n_layers"] = mc.n_layers;
  view["n_heads"] = mc.n_heads;
  view["mlp_ratio"] = mc.mlp_ratio;
  view["tie_embeddings"] = mc.tie_embeddings;
  view["norm_eps"] = mc.norm_eps;
  if (!mc.block_mlp) view["block_mlp"] = false;
  view["block_ffn"] = mc.block_ffn;
  view["block_norm"] = mc.block_norm;
  view["embed_norm"] = mc.embed_norm;
  return view;
}

// mnemo key -> fla field, for the fields of one fla model_type (only fields its defaults list are written).
const std::vector<std::pair<std::string, std::string>>& field_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"head_dim", "head_dim"},          {"expand_k", "expand_k"},
      {"expand_v", "expand_v"},          {"use_short_conv", "use_short_conv"},
      {"short_conv", "use_short_conv"},  {"conv_size", "conv_size"},
      {"output_gate", "use_gate"},       {"allow_neg_eigval", "allow_neg_eigval"},
      {"use_forget_gate", "use_forget_gate"}, {"num_householder", "num_householder"},
      {"use_output_gate", "use_output_gate"}, {"rope_theta", "rope_theta"},
      {"window", "window_size"},         {"mamba_expand", "expand"},
      {"mamba_head_dim", "head_dim"},    {"mamba_d_state", "state_size"},
      {"mamba_ngroups", "n_groups"},     {"conv_size", "conv_kernel"}};
  return names;
}

json candidate_config(const FlaMixerNames& n, json& view, const ModelConfig& mc) {
  json c = n.defaults;
  c["model_type"] = n.model_type;
  c["hidden_size"] = mc.d_model;
  c["num_hidden_layers"] = mc.n_layers;
  c["num_heads"] = view.contains("num_heads") ? view["num_heads"] : json(mc.n_heads);
  if (n.block_mlp && n.block_ffn == "swiglu") {
    c["hidden_ratio"] = mc.mlp_ratio;  // fla's GatedMLP: 256 * ceil(int(2/3 d r) / 256), mnemo's SwiGLU rule
    c["intermediate_size"] = nullptr;
    c["hidden_act"] = "swish";
  }
  c["tie_word_embeddings"] = mc.tie_embeddings;
  c["norm_eps"] = mc.norm_eps;
  c["vocab_size"] = mc.vocab_size;
  for (const auto& [mnemo_key, fla_field] : field_names())
    if (view.contains(mnemo_key) && n.defaults.contains(fla_field)) c[fla_field] = view[mnemo_key];
  if (n.defaults.contains("num_kv_heads") && view.contains("n_kv_heads"))
    c["num_kv_heads"] = view["n_kv_heads"] == 0 ? json() : view["n_kv_heads"];
  if (n.defaults.contains("window_size") && !view.contains("window")) c["window_size"] = nullptr;
  if (view.contains("mamba_head_dim") && view.contains("mamba_expand") && view["mamba_head_dim"].get<int64_t>() > 0)
    c["num_heads"] = static_cast<int64_t>(std::llround(view["mamba_expand"].get<double>() * mc.d_model)) /
                     view["mamba_head_dim"].get<int64_t>();
  if (n.from_mnemo) n.from_mnemo(view, c);
  return c;
}

bool same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return std::abs(a.get<double>() - b.get<double>()) <= 1e-12 * std::abs(b.get<double>());
  return a == b;
}

struct Match {
  FlaModel fla;
  json config;
};

// The fla config whose import is this model, or an Error saying why none is.
Match find_fla_config(const ModelConfig& mc, const std::string& where) {
  if (mc.block_ffn == "cms")
    throw Error("export --format hf: " + where + ": block_ffn \"cms\" (fla has no Continuum Memory System)");
  const json model_view = mnemo_view(mc);
  for (int64_t i = 1; i < mc.n_layers; ++i)
    if (mc.layer_args(i) != mc.layer_args(0))
      throw Error("export --format hf: " + where + ": layer " + std::to_string(i) +
                  " has other mixer arguments than layer 0; fla's models repeat one layer");
  for (const std::string& m : mc.layer_mixers())
    if (m != mc.model)
      throw Error("export --format hf: " + where + ": a hybrid of " + mc.model + " and " + m +
                  " (fla's models repeat one mixer)");
  // fla's attention layers always apply RoPE; no config field turns it off (fox's use_rope is its own: off in fla).
  if (mc.model == "transformer")
    for (int64_t i = 0; i < mc.n_layers; ++i)
      if (!mc.layer_args(i).value("use_rope", true))
        throw Error("export --format hf: " + where + ": layer " + std::to_string(i) +
                    " has use_rope false (NoPE); fla's attention layers always apply RoPE");
  std::string why = "no fla model_type imports as mnemo's " + mc.model;
  const Registry& reg = Registry::instance();
  for (const std::string& name : reg.mixer_names())
    for (const FlaMixerNames& n : reg.mixer(name).traits.fla) {
      if (!n.refusal.empty() || n.block_mlp != mc.block_mlp || (mc.block_mlp && n.block_ffn != mc.block_ffn)) continue;
      json view = model_view;  // a family's from_mnemo resolves its automatic values in its own copy
      const json c = candidate_config(n, view, mc);
      FlaModel back;
      try {
        back = fla_config_to_mnemo(c, "fla " + n.model_type + " config");
      } catch (const Error& e) {
        if (name == mc.model) why = e.what();
        continue;
      }
      if (back.family != mc.model) continue;
      std::string differs;
      for (auto it = back.model_keys.begin(); it != back.model_keys.end() && differs.empty(); ++it) {
        if (it.key() == "n_heads" && view.contains("num_heads")) continue;  // the mixer's own heads are num_heads
        if (!view.contains(it.key()) || !same_value(it.value(), view[it.key()]))
          differs = "fla " + n.model_type + " would give " + it.key() + " = " + json_excerpt(it.value()) +
                    ", the model has " + (view.contains(it.key()) ? json_excerpt(view[it.key()]) : "none");
      }
      if (differs.empty()) return {back, c};
      why = differs;
    }
  throw Error("export --format hf: " + where + " (" + mc.model + ") has no fla equivalent: " + why);
}

}  // namespace

HfExportResult export_fla_folder(const std::string& model_path, const std::string& out_dir_in) {
  const std::string source = resolve_model_path(model_path);
  std::string out_dir = out_dir_in;
  if (out_dir.empty()) {
    if (!has_checkpoint(model_path))
      throw Error("export --format hf: give --out DIR (the folder to create) for " + model_path);
    out_dir = (fs::path(model_path) / "export" / "hf").string();
  }
  std::error_code ec;
  if (fs::exists(out_dir, ec)) throw Error("export --format hf: " + out_dir + " already exists; choose a new --out");
  const json cfg = load_checkpoint_config(model_path);
  Backbone model = load_backbone(model_path, torch::kCPU);
  if (!model.language_model) throw Error("export --format hf: " + source + " holds a " + model.kind + ", not a language model");
  const ModelConfig& mc = model.config();
  const Match match = find_fla_config(mc, source);

  // Weights under fla's names: the import's key map, read backwards.
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  const auto map = fla_key_map(match.fla, fla_model_prefix(match.fla));
  for (const auto& item : model.module->named_parameters()) {
    auto it = map.find(item.key());
    if (it == map.end())
      throw Error("export --format hf: mnemo's parameter '" + item.key() + "' has no place in fla's " +
                  match.fla.fla_model_type);
    const FlaSource& s = it->second;
    const torch::Tensor p = item.value().detach().to(torch::kCPU);
    if (s.fill != FlaSource::Fill::none) {
      const double want = s.fill == FlaSource::Fill::ones ? 1.0 : 0.0;
      if (!torch::all(p == want).item<bool>())
        throw Error("export --format hf: mnemo's '" + item.key() + "' is not all " + (want == 1.0 ? "ones" : "zeros") +
                    ", and fla's " + match.fla.fla_model_type + " has no such parameter (it computes it as the constant)");
      continue;
    }
    tensors.push_back({s.keys.front(), s.fla_shape.empty() ? p.contiguous() : p.reshape(s.fla_shape).contiguous()});
  }
  for (const auto& item : model.module->named_buffers())
    throw Error("export --format hf: mnemo's buffer '" + item.key() + "' has no place in fla's " + match.fla.fla_model_type);

  HfExportResult r;
  r.model_type = match.fla.fla_model_type;
  const fs::path tmp = out_dir + ".tmp";
  remove_tree(tmp.string(), ec);  // not fs::remove_all: core/file_tree.h says why
  fs::create_directories(tmp);
  try {
    json config = match.config;
    config["torch_dtype"] = "float32";
    write_file_atomic((tmp / "config.json").string(), config.dump(2) + "\n");
    write_safetensors((tmp / "model.safetensors").string(), tensors, {{"format", "pt"}});
    const std::string tok = cfg.value("tokenizer", "");
    const fs::path tok_path(tok);
    if (tok_path.filename() == "tokenizer.json" || tok_path.extension() == ".json") {
      fs::copy_file(tok_path, tmp / "tokenizer.json");
      for (const char* extra : {"tokenizer_config.json", "special_tokens_map.json"})
        if (fs::is_regular_file(tok_path.parent_path() / extra, ec)) fs::copy_file(tok_path.parent_path() / extra, tmp / extra);
      r.tokenizer = tok;
    } else if (tok_path.extension() == ".model") {
      fs::copy_file(tok_path, tmp / "tokenizer.model");
      r.tokenizer = tok;
    }
    // Read back with the importer: the same logits, or nothing under the final name.
    Backbone back = load_fla_folder(tmp.string(), torch::kCPU);
    torch::NoGradGuard no_grad;
    const int64_t T = std::min<int64_t>(16, mc.vocab_size);
    const torch::Tensor ids = (torch::arange(T, torch::kLong) * 7919 % mc.vocab_size).view({1, T});
    model.module->eval();
    const torch::Tensor want = model.forward(ids).to(torch::kFloat64), got = back.forward(ids).to(torch::kFloat64);
    r.max_logit_diff = (got - want).abs().max().item<double>();
    const double scale = std::max(1.0, want.abs().max().item<double>());
    if (!(r.max_logit_diff <= 1e-5 * scale))
      throw Error("export --format hf: the written folder does not reproduce the model (max |logit difference| " +
                  std::to_string(r.max_logit_diff) + ")");
    fsync_path(tmp.string(), true);
    fs::rename(tmp, out_dir);
  } catch (...) {
    remove_tree(tmp.string(), ec);
    throw;
  }
  r.dir = out_dir;
  r.tensors = static_cast<int64_t>(tensors.size());
  for (const auto& [name, t] : tensors) r.bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return r;
}

}  // namespace mnemo
