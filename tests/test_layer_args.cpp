// Per-layer mixer arguments (`layers: [{"mixer": ..., key: value}, ...]`) and the flat namespace's rules:
// a flat key applies to every layer whose mixer declares it; a key whose default differs between the pattern's
// mixers keeps each mixer's own default unless set; a key given flat and per layer, a per-layer key the mixer does
// not declare, and a mixer argument named like a task/training key are errors. Every shipped config still resolves.
#include <catch2/catch.hpp>

#include <filesystem>

#include "engine/tools/bench.h"
#include "engine/config/run_config.h"
#include "engine/tools/sweep.h"
#include "runtime/model.h"
#include "runtime/registry.h"
#include "tasks/task.h"
#include "test_util.h"

using namespace mnemo;

namespace {
json tiny_run(const std::string& model) {
  return {{"model", model}, {"task", "mqar"}, {"d_model", 32}, {"n_layers", 2}, {"n_heads", 2}, {"vocab_size", 16},
          {"seq_len", 16}, {"num_kv_pairs", 2}};
}
}  // namespace

TEST_CASE("layers: registered hybrids resolve as before", "[config][layers]") {
  const json samba = resolve_run_config(tiny_run("samba"));
  CHECK(samba["chunk_size"] == 64);  // mamba2's
  CHECK(samba["window"] == 2048);    // swa's
  const json h2 = resolve_run_config(tiny_run("gdn_h2"));  // mamba2 and gated_deltanet share equal defaults
  CHECK(h2["chunk_size"] == 64);
  CHECK(h2["conv_size"] == 4);
  CHECK(h2["form"] == "chunk");
  const json mal = resolve_run_config(tiny_run("atlas_mal"));
  CHECK(mal["n_persistent"] == 4);  // the family's override
}

TEST_CASE("layers: a default is never carried from one mixer to another", "[config][layers]") {
  // gla declares chunk_size 32, mamba2 64: before, the first mixer's default reached both layers.
  json user = tiny_run("gla");
  user["layers"] = {"gla", "mamba2"};
  const json resolved = resolve_run_config(user);
  CHECK_FALSE(resolved.contains("chunk_size"));
  ModelConfig mc = model_config_from_json(resolved);
  CHECK(mc.layer_mixers() == std::vector<std::string>{"gla", "mamba2"});
  CHECK(mc.layer_args(0)["chunk_size"] == 32);
  CHECK(mc.layer_args(1)["chunk_size"] == 64);
  CHECK(mc.layer_args(0)["expand_k"] == 0.5);  // declared by gla alone: flat default

  SECTION("a flat value applies to every layer that declares the key") {
    user["chunk_size"] = 16;
    ModelConfig flat = model_config_from_json(resolve_run_config(user));
    CHECK(flat.layer_args(0)["chunk_size"] == 16);
    CHECK(flat.layer_args(1)["chunk_size"] == 16);
  }
  SECTION("a layers entry sets that layer alone, and repeats with the pattern") {
    user["n_layers"] = 4;
    user["layers"] = json::array({{{"mixer", "gla"}, {"chunk_size", 8}}, "mamba2"});
    ModelConfig per_layer = model_config_from_json(resolve_run_config(user));
    CHECK(per_layer.layer_args(0)["chunk_size"] == 8);
    CHECK(per_layer.layer_args(1)["chunk_size"] == 64);
    CHECK(per_layer.layer_args(2)["chunk_size"] == 8);
    CHECK(per_layer.layer_args(3)["chunk_size"] == 64);
    torch::manual_seed(0);
    LanguageModel model(per_layer);
    auto logits = model->forward(torch::randint(0, 16, {2, 12}, torch::kLong));
    CHECK(logits.sizes() == torch::IntArrayRef({2, 12, 16}));
  }
}

TEST_CASE("layers: per-layer swa windows reach the model (bench FLOP count)", "[config][layers][bench]") {
  BenchOptions opt;
  opt.model = "swa";
  opt.d_model = 32;
  opt.n_layers = 2;
  opt.n_heads = 2;
  opt.set = {{"layers", json::array({{{"mixer", "swa"}, {"window", 2}}, {{"mixer", "swa"}, {"window", 4}}})}};
  ModelConfig mc = model_config_from_json(bench_model_config(opt));
  CHECK(mc.layer_args(0)["window"] == 2);
  CHECK(mc.layer_args(1)["window"] == 4);
  const int64_t P = 1000, T = 8, d = 32;
  const double pairs = (1 + 2 * 7) + (1 + 2 + 3 + 4 * 5);  // window 2, then window 4
  CHECK(bench_flops(mc, P, "fwd", 1, T, 4) == Approx(2.0 * P * T + 4.0 * d * pairs));
}

TEST_CASE("layers: clashes and bad entries are errors naming the entry", "[config][layers]") {
  json user = tiny_run("gla");
  user["layers"] = json::array({{{"mixer", "gla"}, {"chunk_size", 8}}, "mamba2"});
  json both = user;
  both["chunk_size"] = 16;
  CHECK_THROWS_WITH(resolve_run_config(both), Catch::Contains("'chunk_size' is given both flat and in layers[0]"));

  json undeclared = user;
  undeclared["layers"] = json::array({"gla", {{"mixer", "mamba2"}, {"window", 8}}});
  CHECK_THROWS_WITH(resolve_run_config(undeclared),
                    Catch::Contains("layers[1]") && Catch::Contains("mixer 'mamba2' has no argument 'window'"));

  json wrong_type = user;
  wrong_type["layers"] = json::array({{{"mixer", "gla"}, {"chunk_size", "big"}}});
  CHECK_THROWS_WITH(resolve_run_config(wrong_type), Catch::Contains("layers[0].chunk_size expects a number"));

  json unknown_mixer = user;
  unknown_mixer["layers"] = json::array({"gla", "no_such_mixer"});
  CHECK_THROWS_WITH(resolve_run_config(unknown_mixer), Catch::Contains("unknown mixer 'no_such_mixer'"));

  json malformed = user;
  malformed["layers"] = json::array({{{"chunk_size", 8}}});
  CHECK_THROWS_WITH(resolve_run_config(malformed), Catch::Contains("layers[0] must be a mixer name or an object"));
  malformed["layers"] = "gla";
  CHECK_THROWS_WITH(resolve_run_config(malformed), Catch::Contains("'layers' must be a list"));

  BenchOptions opt;
  opt.model = "gla";
  opt.set = {{"layers", json::array({{{"mixer", "gla"}, {"chunk_size", 8}}})}, {"chunk_size", 4}};
  CHECK_THROWS_WITH(bench_model_config(opt), Catch::Contains("bench: --set key 'chunk_size' is given both"));
}

TEST_CASE("layers: no mixer argument shares a name with a training, skeleton or task key", "[config][layers]") {
  // resolve_run_config refuses such a clash; this checks every registered (model, task) pair resolves.
  for (const auto& model : Registry::instance().model_names())
    for (const auto& task : TaskRegistry::instance().names()) {
      CAPTURE(model, task);
      CHECK_NOTHROW(resolve_run_config({{"model", model}, {"task", task}}));
    }
}

TEST_CASE("layers: every shipped config still resolves (sweeps cell by cell)", "[config][layers]") {
  for (const auto& entry : std::filesystem::directory_iterator(std::string(MNEMO_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".json") continue;
    CAPTURE(entry.path().string());
    const json file = read_json_file(entry.path().string());
    if (file.contains("model")) {  // a run config (configs/mqar_transformer.json)
      CHECK_NOTHROW(resolve_run_config(file));
      continue;
    }
    for (const json& cell : expand_sweep(file)) CHECK_NOTHROW(resolve_run_config(cell));
  }
}
