// Hugging Face folders of flash-linear-attention models: read against fla's own logits, written back by `mnemo export
// --format hf` for fla's own code, and bad folders named (engine/io/fla_import.h, fla_export.h).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include "runtime/backbone.h"
#include "engine/io/checkpoint.h"
#include "engine/io/export.h"
#include "engine/io/fla_checkpoint.h"
#include "engine/io/fla_export.h"
#include "engine/io/fla_import.h"
#include "engine/config/run_config.h"
#include "engine/io/safetensors.h"
#include "runtime/layers.h"
#include "test_util.h"
using namespace mnemo;
namespace fs = std::filesystem;
using Tensors = std::vector<std::pair<std::string, torch::Tensor>>;
using Weights = std::map<std::string, torch::Tensor>;
using Shapes = std::map<std::string, std::vector<int64_t>>;

namespace {
// The ids and logits a reference recorded in an expected.json ({"ids", "logits", "logits_shape"}).
std::pair<torch::Tensor, torch::Tensor> recorded_logits(const json& expected) {
  const auto rows = expected.at("ids").get<std::vector<std::vector<int64_t>>>();
  std::vector<int64_t> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  auto ids = torch::tensor(flat, torch::kLong).view({static_cast<int64_t>(rows.size()), -1});
  auto logits = torch::tensor(expected.at("logits").get<std::vector<double>>(), torch::kFloat64)
                    .view(expected.at("logits_shape").get<std::vector<int64_t>>());
  return {ids, logits};
}
}  // namespace

TEST_CASE("import-fla: fla's own model code gives the same logits (every importable model_type, the folder read "
          "directly and the imported checkpoint)", "[export][fla]") {
  // tests/data/fla_models/<model_type>: a random model of fla's own class saved by save_pretrained, and the logits of
  // fla's forward on two fixed sequences (scripts/make_fla_models.py, fp32, fla's Triton kernels under Triton's
  // interpreter). Both sides compute in fp32 with different summation orders.
  const fs::path models = fs::path(MNEMO_SOURCE_DIR) / "tests" / "data" / "fla_models";
  const std::map<std::string, std::string> family = {{"kda", "kda"},
                                                     {"mesa_net", "mesa_net"},
                                                     {"gated_deltaproduct", "gated_deltaproduct"},
                                                     {"forgetting_transformer", "fox"},
                                                     {"gated_deltanet", "gated_deltanet"},
                                                     {"transformer", "transformer"},
                                                     {"gla", "gla"},
                                                     {"retnet", "retnet"},
                                                     {"delta_net", "deltanet"},
                                                     {"hgrn2", "hgrn2"},
                                                     {"gsa", "gsa"},
                                                     {"mamba", "mamba"},
                                                     {"mamba2", "mamba2"},
                                                     {"log_linear_mamba2", "log_linear_mamba2"},
                                                     {"mamba3", "mamba3"},
                                                     {"mamba3_mimo", "mamba3"},
                                                     {"path_attn", "path_attn"},
                                                     {"rwkv7", "rwkv7"},
                                                     {"gla_llama2_tokenizer", "gla"}};
  for (const auto& [type, mnemo_family] : family) {
    DYNAMIC_SECTION(type) {
      auto dir = test::temp_dir("fla_own_" + type);
      const json expected = json::parse(std::ifstream(models / type / "expected.json"));
      const FlaImportResult r = import_fla((models / type).string(), (dir / "run").string(), "mqar", {{"seq_len", 32}});
      REQUIRE(r.family == mnemo_family);
      Backbone imported = load_backbone((dir / "run").string(), torch::kCPU);
      REQUIRE(is_hf_model_folder((models / type).string()));
      Backbone direct = load_backbone((models / type).string(), torch::kCPU);  // mnemo eval --checkpoint DIR
      const auto [ids, want] = recorded_logits(expected);
      torch::NoGradGuard g;
      auto got = imported.forward(ids).to(torch::kFloat64);
      INFO(type << ": max |got - fla| = " << (got - want).abs().max().item<double>() << ", max |fla| = "
                << want.abs().max().item<double>());
      CHECK(test::max_rel_err(got, want) < 1e-4);
      CHECK(torch::equal(direct.forward(ids).to(torch::kFloat64), got));
    }
  }
}

TEST_CASE("export --format hf writes back fla's own folder: the same config and the same tensors", "[export][fla]") {
  // The fixtures were saved by fla's own classes; mnemo reads one, writes it as a Hugging Face folder, and the
  // written folder must be fla's: every tensor under fla's name with fla's values, and a config.json that imports to
  // the same model. fla's logits on the original (expected.json) are then the logits of the export as well.
  const fs::path models = fs::path(MNEMO_SOURCE_DIR) / "tests" / "data" / "fla_models";
  for (const std::string type : {"transformer", "gla", "retnet", "delta_net", "gated_deltanet", "kda",
                                 "gated_deltaproduct", "forgetting_transformer", "hgrn2", "gsa", "mamba", "mamba2", "log_linear_mamba2", "mamba3", "mamba3_mimo", "path_attn", "rwkv7",
                                 "gla_llama2_tokenizer"}) {
    DYNAMIC_SECTION(type) {
      auto dir = test::temp_dir("hf_export_" + type);
      const HfExportResult r = export_fla_folder((models / type).string(), (dir / "hf").string());
      CHECK(r.max_logit_diff < 1e-5);
      const fs::path out = dir / "hf";
      CHECK(!fs::exists(dir / "hf.tmp"));
      const json original_config = read_json_file((models / type / "config.json").string());
      const json written_config = read_json_file((out / "config.json").string());
      CHECK(written_config.at("model_type") == original_config.at("model_type"));
      const FlaModel a = fla_config_to_mnemo(original_config, "original"), b = fla_config_to_mnemo(written_config, "written");
      CHECK(a.family == b.family);
      CHECK(a.model_keys == b.model_keys);
      const SafetensorsFile original((models / type / "model.safetensors").string());
      const SafetensorsFile written((out / "model.safetensors").string());
      CHECK(written.metadata().at("format") == "pt");
      for (const auto& [name, entry] : original.entries()) {
        INFO(type << ": " << name);
        const bool derived = name.find("rotary.inv_freq") != std::string::npos ||
                             (name == "lm_head.weight" && a.model_keys.at("tie_embeddings").get<bool>());
        if (derived) continue;
        // fla names GLA's output norm by its fuse_norm setting: g_norm (unfused), g_norm_swish_gate (fused, the
        // default the export keeps).
        const std::string suffix = "g_norm.weight";
        std::string name_written = name;
        if (!written.contains(name) && name.size() > suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
          name_written = name.substr(0, name.size() - suffix.size()) + "g_norm_swish_gate.weight";
        REQUIRE(written.contains(name_written));
        CHECK(torch::equal(written.load(name_written), original.load(name).to(torch::kFloat32)));
      }
      CHECK(written.entries().size() <= original.entries().size());
      CHECK(fs::exists(out / "tokenizer.json") == fs::exists(models / type / "tokenizer.json"));
      // The export reads back (eval --checkpoint DIR) to the same logits as the original folder.
      Backbone from_original = load_backbone((models / type).string(), torch::kCPU);
      Backbone from_export = load_backbone(out.string(), torch::kCPU);
      torch::NoGradGuard g;
      const auto ids = torch::arange(12, torch::kLong).view({1, 12}) % 64;
      CHECK(torch::equal(from_original.forward(ids), from_export.forward(ids)));
      // An existing folder is never overwritten.
      CHECK_THROWS_WITH(export_fla_folder((models / type).string(), out.string()), Catch::Contains("already exists"));
    }
  }
}

TEST_CASE("export --format hf refuses a model fla has no equivalent for, naming why", "[export][fla][cli]") {
  auto dir = test::temp_dir("hf_export_refusals");
  const std::string run = (dir / "run").string();
  auto t = test::run_mnemo("train --model titans_lmm --task mqar --set vocab_size=64 --set seq_len=32 --set steps=1 "
                           "--set d_model=32 --set batch_size=2 --quiet --out " + run + " --db " + (dir / "db.sqlite").string());
  INFO(t.output);
  REQUIRE(t.exit_code == 0);
  auto e = test::run_mnemo("export --checkpoint " + run + " --format hf --out " + (dir / "hf").string());
  CHECK(e.exit_code == 1);
  CHECK(e.output.find("mnemo: error: export --format hf: ") != std::string::npos);
  CHECK(e.output.find("has no fla equivalent") != std::string::npos);
  CHECK(!fs::exists(dir / "hf"));
  CHECK(!fs::exists(dir / "hf.tmp"));
  // Attention without RoPE (Kimi Linear's global layers) has no fla config.
  auto nope = test::run_mnemo("train --model transformer --task mqar --set vocab_size=64 --set seq_len=32 --set steps=1 "
                              "--set d_model=32 --set batch_size=2 --set use_rope=false --quiet --out " + run + "_nope --db " +
                              (dir / "db.sqlite").string());
  REQUIRE(nope.exit_code == 0);
  auto e_nope = test::run_mnemo("export --checkpoint " + run + "_nope --format hf --out " + (dir / "hf_nope").string());
  CHECK(e_nope.exit_code == 1);
  CHECK(e_nope.output.find("use_rope false") != std::string::npos);
  CHECK(!fs::exists(dir / "hf_nope"));
  // The default folder of a run is RUN/export/hf; a transformer run exports.
  auto t2 = test::run_mnemo("train --model transformer --task mqar --set vocab_size=64 --set seq_len=32 --set steps=1 "
                            "--set d_model=32 --set batch_size=2 --quiet --out " + run + "2 --db " + (dir / "db.sqlite").string());
  REQUIRE(t2.exit_code == 0);
  auto e2 = test::run_mnemo("export --checkpoint " + run + "2 --format hf");
  INFO(e2.output);
  CHECK(e2.exit_code == 0);
  CHECK(fs::exists(fs::path(run + "2") / "export" / "hf" / "model.safetensors"));
  CHECK(read_json_file((fs::path(run + "2") / "export" / "hf" / "config.json").string()).at("model_type") == "transformer");
}

TEST_CASE("export --format hf: mnemo's own models give the same logits in fla's code", "[export][fla]") {
  // tests/data/fla_export/<family>: a tiny model trained by mnemo (mnemo.safetensors + mnemo.json), whose
  // `--format hf` folder fla's own code loaded (no missing or unexpected keys) and ran on fixed ids
  // (scripts/make_fla_export_fixtures.py). The export made here must be that folder byte for byte, so fla's
  // logits are its logits; mnemo's logits of the model must equal them.
  const fs::path fixtures = fs::path(MNEMO_SOURCE_DIR) / "tests" / "data" / "fla_export";
  for (const std::string family : {"transformer", "swa", "gla", "retnet", "deltanet", "gated_deltanet", "kda",
                                   "gated_deltaproduct", "fox", "mamba2", "rwkv7", "hgrn2", "mamba", "gsa"}) {
    DYNAMIC_SECTION(family) {
      auto dir = test::temp_dir("fla_export_" + family);
      const std::string model = (fixtures / family / "mnemo.safetensors").string();
      const json expected = read_json_file((fixtures / family / "expected.json").string());
      const HfExportResult r = export_fla_folder(model, (dir / "hf").string());
      CHECK(sha256_file((dir / "hf" / "model.safetensors").string()) == expected.at("hf_model_sha256"));
      CHECK(read_json_file((dir / "hf" / "config.json").string()) == expected.at("hf_config"));
      Backbone m = load_backbone(model, torch::kCPU);
      const auto [ids, want] = recorded_logits(expected);
      torch::NoGradGuard g;
      auto got = m.forward(ids).to(torch::kFloat64);
      INFO(family << " (" << r.model_type << "): max |mnemo - fla| = " << (got - want).abs().max().item<double>()
                  << ", max |fla| = " << want.abs().max().item<double>());
      CHECK(test::max_rel_err(got, want) < 1e-4);
    }
  }
}

TEST_CASE("Hugging Face folders: sharded weights load as one file, and bad folders are named", "[export][fla]") {
  const fs::path fixture = fs::path(MNEMO_SOURCE_DIR) / "tests" / "data" / "fla_models" / "gla";
  auto dir = test::temp_dir("hf_folders");
  // Two shards and their index, as save_pretrained writes a large model.
  const fs::path sharded = dir / "sharded";
  fs::create_directories(sharded);
  fs::copy_file(fixture / "config.json", sharded / "config.json");
  const SafetensorsFile whole((fixture / "model.safetensors").string());
  std::vector<std::pair<std::string, torch::Tensor>> first, second;
  json weight_map = json::object();
  for (const auto& [name, entry] : whole.entries()) {
    const bool in_first = first.size() <= second.size();
    (in_first ? first : second).push_back({name, whole.load(name)});
    weight_map[name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors((sharded / "model-00001-of-00002.safetensors").string(), first, {{"format", "pt"}});
  write_safetensors((sharded / "model-00002-of-00002.safetensors").string(), second, {{"format", "pt"}});
  std::ofstream(sharded / "model.safetensors.index.json") << json{{"metadata", json::object()}, {"weight_map", weight_map}}.dump();
  REQUIRE(is_hf_model_folder(sharded.string()));
  {
    Backbone a = load_backbone(fixture.string(), torch::kCPU), b = load_backbone(sharded.string(), torch::kCPU);
    torch::NoGradGuard g;
    const auto ids = torch::arange(10, torch::kLong).view({1, 10});
    CHECK(torch::equal(a.forward(ids), b.forward(ids)));
  }
  // A shard the index names that is not there.
  fs::remove(sharded / "model-00002-of-00002.safetensors");
  CHECK_THROWS_WITH(load_backbone(sharded.string(), torch::kCPU), Catch::Contains("model-00002-of-00002.safetensors"));

  // A weight of the wrong shape, or not floating point.
  auto with_tensor = [&](const std::string& folder, const std::string& key, const torch::Tensor& t) {
    const fs::path d = dir / folder;
    fs::create_directories(d);
    fs::copy_file(fixture / "config.json", d / "config.json", fs::copy_options::overwrite_existing);
    std::vector<std::pair<std::string, torch::Tensor>> all;
    for (const auto& [name, entry] : whole.entries()) all.push_back({name, name == key ? t : whole.load(name)});
    write_safetensors((d / "model.safetensors").string(), all);
    return d.string();
  };
  const std::string embed = "model.embeddings.weight";
  CHECK_THROWS_WITH(load_backbone(with_tensor("bad_shape", embed, torch::zeros({63, 32})), torch::kCPU),
                    Catch::Contains("'" + embed + "' is [63,32]") && Catch::Contains("config.json and the weights disagree"));
  CHECK_THROWS_WITH(load_backbone(with_tensor("bad_dtype", embed, torch::zeros({64, 32}, torch::kLong)), torch::kCPU),
                    Catch::Contains("'" + embed + "' is not a floating-point tensor"));

  // An unknown model_type; a config field mnemo cannot honour; no weights at all.
  const fs::path odd = dir / "odd";
  fs::create_directories(odd);
  fs::copy_file(fixture / "model.safetensors", odd / "model.safetensors");
  json config = read_json_file((fixture / "config.json").string());
  config["model_type"] = "rwkv6";
  std::ofstream(odd / "config.json") << config.dump();
  CHECK_THROWS_WITH(load_checkpoint_config(odd.string()), Catch::Contains("'rwkv6' has no mnemo import"));
  config = read_json_file((fixture / "config.json").string());
  config["clamp_min"] = -5;
  std::ofstream(odd / "config.json") << config.dump();
  CHECK_THROWS_WITH(load_backbone(odd.string(), torch::kCPU), Catch::Contains("clamp_min"));
  fs::remove(odd / "model.safetensors");
  CHECK_FALSE(is_hf_model_folder(odd.string()));
  auto ev = test::run_mnemo("eval --checkpoint " + odd.string() + " --tasks piqa");
  CHECK(ev.exit_code == 1);
  CHECK(ev.output.find("mnemo: error: ") != std::string::npos);

  // A tokenizer whose vocabulary is not the embedding's.
  const fs::path mismatched = dir / "mismatched";
  fs::create_directories(mismatched);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture / f, mismatched / f);
  fs::copy_file(fs::path(MNEMO_SOURCE_DIR) / "tests" / "data" / "tokenizers" / "llama2" / "tokenizer.json",
                mismatched / "tokenizer.json");
  const fs::path data = dir / "data" / "eval" / "piqa";
  fs::create_directories(data);
  std::ofstream(data / "valid.jsonl") << R"({"goal": "To open a jar,", "sol1": "twist the lid.", "sol2": "eat it."})" << "\n";
  std::ofstream(data / "valid-labels.lst") << "0\n";
  auto mm = test::run_mnemo("eval --checkpoint " + mismatched.string() + " --tasks piqa --skip-malformed --data-dir " +
                            (dir / "data").string() + " --output-path " + (dir / "out").string() + " --db " +
                            (dir / "db.sqlite").string());
  INFO(mm.output);
  CHECK(mm.exit_code == 1);
  CHECK(mm.output.find("has 2556 tokens but the model's vocab_size is 64") != std::string::npos);
}
