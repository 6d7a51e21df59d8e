#include "engine/io/export.h"

#include <deque>
#include <filesystem>
#include <set>

#include "engine/io/checkpoint.h"
#include "engine/io/model_files.h"
#include "engine/config/run_config.h"
#include "engine/io/safetensors.h"

namespace mnemo {
namespace fs = std::filesystem;

namespace {

fs::path canonical_or_normal(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c;
}

// "x.safetensors" -> "x" (the user may name the file itself).
std::string strip_extension(const std::string& path) {
  const std::string ext = ".safetensors";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
    return path.substr(0, path.size() - ext.size());
  return path;
}

// The backbone a checkpoint describes (as load_backbone builds it), without its weights.
Backbone build_checkpoint_backbone(const std::string& dir) {
  json resolved;
  try {
    resolved = resolve_run_config(load_checkpoint_config(dir));
  } catch (const Error& e) {
    throw Error("incompatible checkpoint " + dir + ": " + e.what());
  }
  ModelConfig mc = model_config_from_json(resolved);
  const CheckpointModelMeta meta = read_model_meta(dir);
  mc.vocab_size = meta.vocab_size.value_or(mc.vocab_size);
  return make_backbone(meta.backbone ? *meta.backbone : backbone_kind(resolved), mc);
}

}  // namespace

std::string default_export_path(const std::string& checkpoint) {
  fs::path base(checkpoint);
  // A checkpoint folder given directly: write beside it, not into it (the next save replaces the folder).
  if (canonical_or_normal(resolve_checkpoint_path(checkpoint)) == canonical_or_normal(base)) {
    base = canonical_or_normal(base).parent_path();
  }
  return (base / "export" / "model").string();
}

ExportResult export_checkpoint(const std::string& checkpoint, const std::string& format, const std::string& out_path) {
  if (format != "safetensors") throw Error("export: unknown --format '" + format + "' (supported: safetensors, hf)");
  const std::string dir = resolve_checkpoint_path(checkpoint);
  Backbone model = build_checkpoint_backbone(dir);
  const auto state = stored_state((fs::path(dir) / "model.pt").string(), model);
  json cfg = load_checkpoint_config(dir);
  if (cfg.contains("format") || cfg.contains("mnemo_model"))
    throw Error("checkpoint " + dir + ": config.json already has a key 'format' or 'mnemo_model'");
  const ModelConfig& mc = model.config();
  cfg["format"] = kSafetensorsExportFormat;
  cfg["mnemo_model"] = {{"vocab_size", mc.vocab_size}, {"layer_mixers", mc.layer_mixers()}, {"backbone", model.kind}};

  const std::string base = strip_extension(out_path.empty() ? default_export_path(checkpoint) : out_path);
  ExportResult r;
  r.safetensors_path = base + ".safetensors";
  r.json_path = base + ".json";
  for (const auto& [name, t] : state) r.bytes += t.numel() * static_cast<int64_t>(t.element_size());
  r.tensors = static_cast<int64_t>(state.size());
  write_safetensors(r.safetensors_path, state,
                    {{"format", kSafetensorsExportFormat}, {"backbone", model.kind}, {"model", mc.model}});
  write_file_atomic(r.json_path, cfg.dump(2) + "\n");
  return r;
}

}  // namespace mnemo
