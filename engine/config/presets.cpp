#include "engine/config/presets.h"

#include <algorithm>
#include <map>

namespace mnemo {

const std::vector<SizePreset>& size_presets() {
  static const std::vector<SizePreset> s = {
      {"tiny", 2, 128, 4, "mnemo (docs/models.md#sizes-and-recipes)"},
      {"small", 6, 256, 4, "mnemo (docs/models.md#sizes-and-recipes)"},
      {"base", 12, 768, 12, "mnemo (docs/models.md#sizes-and-recipes), the 110M/170M class"},
      {"170M", 12, 768, 16, "Titans/Miras/Atlas (docs/models.md#sizes-and-recipes)"},
      {"340M", 24, 1024, 16, "Titans/Miras/Atlas (§11.1); MoM 340M = 24 x 1024 too"},
      {"760M", 24, 1536, 16, "Titans/Miras/Atlas (§11.1)"},
      {"1.3B", 18, 2048, 8, "Atlas (§11.1)"},
      {"mom-1.3B", 24, 2048, 16, "MoM (§11.2: 24 layers x 2048; heads not stated, 16 assumed)"},
      {"lattice-110M", 12, 768, 12, "Lattice (§11.3, d_head 64)"},
      {"lattice-340M", 24, 1024, 16, "Lattice (§11.3, d_head 64)"},
      {"lattice-760M", 24, 1536, 24, "Lattice (§11.3, d_head 64)"},
  };
  return s;
}

const SizePreset& size_preset(const std::string& name) {
  std::string known;
  for (const auto& p : size_presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw Error("config key 'size': unknown size '" + name + "'; known sizes: " + known);
}

namespace {
struct Recipe {
  std::string description;
  std::map<std::string, double> lr_by_size;  // "" = any size
  double beta1, beta2, weight_decay, clip, final_lr;  // final_lr < 0: min_lr_ratio below
  double min_lr_ratio;
  int64_t warmup_steps, seq_len, batch_tokens;
};
const std::map<std::string, Recipe>& recipes() {
  static const std::map<std::string, Recipe> r = {
      {"titans",
       {"Titans/Miras/Atlas (docs/models.md#sizes-and-recipes): AdamW (0.9, 0.95), wd 0.1, per-size peak lr, warm-up 1024 "
        "steps, cosine to 10 %, clip 1.0, 2^19 tokens per batch, context 4096",
        {{"170M", 3e-3}, {"340M", 1.5e-3}, {"760M", 1.25e-3}, {"1.3B", 7e-4}}, 0.9, 0.95, 0.1, 1.0, -1, 0.1, 1024,
        4096, 524288}},
      {"mom",
       {"MoM (docs/models.md#sizes-and-recipes): AdamW lr 3e-4 (0.9, 0.95), wd 0.01, warm-up 1024 steps, cosine to 10 %, clip 1.0, "
        "0.5M tokens per batch (2M at 1.3B), context 2048",
        {{"", 3e-4}}, 0.9, 0.95, 0.01, 1.0, -1, 0.1, 1024, 2048, 524288}},
      {"lattice",
       {"Lattice (docs/models.md#sizes-and-recipes): AdamW, wd 0.1, per-size peak lr, warm-up 1000 steps, cosine to lr 3e-5, clip 1.0, "
        "0.5M tokens per batch, context 4096",
        {{"lattice-110M", 1e-2}, {"lattice-340M", 1.5e-3}, {"lattice-760M", 1.25e-3}}, 0.9, 0.95, 0.1, 1.0, 3e-5, 0,
        1000, 4096, 524288}},
  };
  return r;
}
}  // namespace

std::vector<std::string> recipe_names() {
  std::vector<std::string> n;
  for (const auto& [k, v] : recipes()) n.push_back(k);
  return n;
}

std::string recipe_description(const std::string& recipe) {
  auto it = recipes().find(recipe);
  return it == recipes().end() ? "" : it->second.description;
}

json preset_keys(const std::string& size, const std::string& recipe, bool seq_len_known, int64_t grad_accum,
                 bool lr_given) {
  json out = json::object();
  if (!size.empty()) {
    const SizePreset& p = size_preset(size);
    out["n_layers"] = p.n_layers;
    out["d_model"] = p.d_model;
    out["n_heads"] = p.n_heads;
  }
  if (recipe.empty()) return out;
  auto it = recipes().find(recipe);
  if (it == recipes().end()) {
    std::string known;
    for (const auto& n : recipe_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error("config key 'recipe': unknown recipe '" + recipe + "'; known recipes: " + known);
  }
  const Recipe& r = it->second;
  double lr = 0;
  if (r.lr_by_size.count("")) {
    lr = r.lr_by_size.at("");
  } else if (r.lr_by_size.count(size)) {
    lr = r.lr_by_size.at(size);
  } else if (lr_given) {
    lr = r.lr_by_size.begin()->second;  // replaced by the user's lr; only the floor ratio uses it
  } else {
    std::string sizes;
    for (const auto& [s, v] : r.lr_by_size) sizes += (sizes.empty() ? "" : ", ") + s;
    throw Error("config key 'recipe': recipe '" + recipe + "' gives a peak learning rate for the sizes " + sizes +
                ", not for size '" + (size.empty() ? std::string("(none)") : size) + "'; set size or lr");
  }
  out["lr"] = lr;
  out["beta1"] = r.beta1;
  out["beta2"] = r.beta2;
  out["adam_eps"] = 1e-8;
  out["weight_decay"] = r.weight_decay;
  out["grad_clip"] = r.clip;
  out["min_lr_ratio"] = r.final_lr > 0 ? r.final_lr / lr : r.min_lr_ratio;
  out["warmup_steps"] = r.warmup_steps;
  if (seq_len_known) {
    const int64_t batch_tokens = recipe == "mom" && size == "mom-1.3B" ? 2097152 : r.batch_tokens;
    out["seq_len"] = r.seq_len;
    out["batch_size"] = std::max<int64_t>(1, batch_tokens / r.seq_len / std::max<int64_t>(1, grad_accum));
  }
  return out;
}

int64_t count_parameters(const ModelConfig& cfg) {
  torch::NoGradGuard no_grad;
  const int64_t norm_params = cfg.d_model * (cfg.block_norm == "layernorm" ? 2 : 1);
  int64_t total = cfg.vocab_size * cfg.d_model * (cfg.tie_embeddings ? 1 : 2) + norm_params * (cfg.embed_norm ? 2 : 1);
  const auto pattern = cfg.pattern();
  const auto mixers = cfg.layer_mixers();
  auto scratch = std::make_shared<ModelScratch>();
  // (pattern index, first layer of its mixer) -> params of its block: a mixer's first layer may differ from its
  // later ones (RWKV-7's value residual).
  std::map<std::pair<int64_t, bool>, int64_t> per_pattern_entry;
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    const bool first = std::find(mixers.begin(), mixers.end(), mixers[i]) - mixers.begin() == i;
    const std::pair<int64_t, bool> k{i % int64_t(pattern.size()), first};
    if (!per_pattern_entry.count(k)) {
      Block b(cfg, i, scratch);
      int64_t n = 0;
      for (const auto& p : b->parameters()) n += p.numel();
      per_pattern_entry[k] = n;
    }
    total += per_pattern_entry[k];
  }
  return total;
}
}  // namespace mnemo
