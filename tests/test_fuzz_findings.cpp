// What the fuzz targets (tests/fuzz) found, each pinned as a test: the input that escaped a parser before
// now ends in one mnemo::Error naming the file/field, or parses.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/common.h"
#include "core/config_values.h"
#include "engine/io/checkpoint.h"
#include "engine/evaluation/score.h"
#include "engine/tools/sweep.h"
#include "runtime/ops/fixture.h"
#include "tasks/harness/py_compat.h"
#include "tests/test_util.h"
#include "file_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

TEST_CASE("Python strip keeps byte offsets on invalid and overlong UTF-8 (fuzz: task_data)", "[fuzz][harness]") {
  // 0xB2 alone is no UTF-8; C0 80 is an overlong NUL: each decodes to one code point of another byte length.
  CHECK(harness::py::strip(" \xb2x \n") == "\xb2x");
  CHECK(harness::py::strip("\xc0\x80  ") == "\xc0\x80");
  CHECK(harness::py::lstrip("\t\xb2\xb2 ") == "\xb2\xb2 ");
  CHECK(harness::py::rstrip(" \xe2\x80") == " \xe2\x80");  // a truncated 3-byte sequence
  CHECK(harness::py::strip("\xe3\x80\x80x\xe3\x80\x80") == "x");  // U+3000 is Python whitespace
}

TEST_CASE("set-values (key=value) that are not UTF-8 are refused, naming the key (fuzz: config)", "[fuzz][config]") {
  CHECK_THROWS_WITH(key_value_pairs_to_json({"n_heads=\xb2"}),
                    Catch::Contains("'n_heads' value is not valid UTF-8") && Catch::Contains("0xB2"));
  CHECK_THROWS_WITH(key_value_pairs_to_json({"d_\xff=1"}), Catch::Contains("key is not valid UTF-8"));
  CHECK(invalid_utf8_offset("caf\xc3\xa9") == std::string::npos);
  CHECK(invalid_utf8_offset("ab\xed\xa0\x80") == 2);  // a UTF-16 surrogate
  CHECK(invalid_utf8_offset("\xf4\x90\x80\x80") == 0);  // above U+10FFFF
  CHECK(invalid_utf8_offset("x\xc3") == 1);  // truncated
}

TEST_CASE("a sweep grid too large to expand is refused before expanding", "[fuzz][sweep]") {
  json grid = json::object();
  for (int a = 0; a < 9; ++a) grid["k" + std::to_string(a)] = json::array({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  CHECK_THROWS_WITH(expand_sweep({{"base", {{"model", "transformer"}}}, {"grid", grid}}),
                    Catch::Contains("expands to 1e+09 cells") && Catch::Contains("more than 100000"));
}

TEST_CASE("a predictions line with a number beyond a double names file:line (fuzz: predictions)", "[fuzz][score]") {
  const auto dir = test::temp_dir("fuzz_pred");
  const auto file = (dir / "p.jsonl").string();
  std::ofstream(file) << "{\"prediction\": \"a\", \"target\": \"a\", \"question\": \"q\"}\n"
                      << "{\"prediction\": 2000127730041448779e0041448779}\n";
  CHECK_THROWS_WITH(score_predictions("babilong_qa1", file, "strict"),
                    Catch::Contains(file + ":2: not valid JSON") && Catch::Contains("number overflow"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("checkpoint metadata with wrong types or ranges names the file and the field", "[fuzz][checkpoint]") {
  CHECK_THROWS_WITH(parse_model_meta({{"vocab_size", "258"}}, "m.json"),
                    Catch::Contains("m.json") && Catch::Contains("'vocab_size' must be an integer in [1, 16777216]"));
  CHECK_THROWS_WITH(parse_model_meta({{"vocab_size", int64_t{1} << 40}}, "m.json"), Catch::Contains("'vocab_size'"));
  CHECK_THROWS_WITH(parse_model_meta({{"backbone", 3}}, "m.json"), Catch::Contains("'backbone' must be a string"));
  CHECK_THROWS_WITH(parse_model_meta({{"layer_mixers", {"gla", 2}}}, "m.json"),
                    Catch::Contains("'layer_mixers' must be an array of mixer names"));
  CHECK_THROWS_WITH(parse_model_meta(json::array(), "m.json"), Catch::Contains("expected a JSON object"));
  const auto m = parse_model_meta({{"vocab_size", 258}, {"backbone", "lm"}, {"layer_mixers", {"gla", "swa"}}}, "m");
  CHECK(*m.vocab_size == 258);
  CHECK(*m.backbone == "lm");
  CHECK(m.layer_mixers->size() == 2);

  const auto dir = test::temp_dir("fuzz_ckpt");
  fs::create_directories(dir / "checkpoint");
  std::ofstream(dir / "checkpoint" / "config.json") << "{}";
  std::ofstream(dir / "checkpoint" / "model.pt") << "";
  std::ofstream(dir / "checkpoint" / "trainer.json") << "{\"step\": -3, \"run_id\": 1}";
  CHECK_THROWS_WITH(load_trainer_state(dir.string()),
                    Catch::Contains("corrupted trainer state") && Catch::Contains("'step' must be >= 0"));
  std::ofstream(dir / "checkpoint" / "trainer.json") << "{\"step\": \"x\", \"run_id\": 1}";
  CHECK_THROWS_WITH(load_trainer_state(dir.string()), Catch::Contains("corrupted trainer state"));
  // fuzz_checkpoint: a float too large for int64 (undefined behaviour in the conversion before).
  std::ofstream(dir / "checkpoint" / "trainer.json") << "{\"step\": 2.22222e+81, \"run_id\": 1}";
  CHECK_THROWS_WITH(load_trainer_state(dir.string()),
                    Catch::Contains("corrupted trainer state") && Catch::Contains("'step' must be an integer"));
  std::ofstream(dir / "checkpoint" / "trainer.json") << "{\"step\": 3, \"run_id\": 1, \"train_tokens\": 1e300}";
  CHECK_THROWS_WITH(load_trainer_state(dir.string()), Catch::Contains("'train_tokens' must be an integer"));
  std::ofstream(dir / "checkpoint" / "model.json") << "{\"vocab_size\": 0}";
  CHECK_THROWS_WITH(read_model_meta((dir / "checkpoint").string()), Catch::Contains("model.json"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("a fixture tensor whose shape overflows 64 bits is an Error naming the field (fuzz: fixture)",
          "[fuzz][fixtures]") {
  const json t = {{"shape", {185723, int64_t{671640460909682}, 3}}, {"dtype", "float64"}, {"data", {1.0}}};
  CHECK_THROWS_WITH(tensor_from_json(t, "f.json: inputs.q"),
                    Catch::Contains("f.json: inputs.q.shape") && Catch::Contains("more elements than a tensor can hold"));
  // A zero after the large sizes is still an empty tensor, not an overflow.
  const json empty = {{"shape", {int64_t{1} << 40, 0}}, {"dtype", "float64"}, {"data", json::array()}};
  CHECK(tensor_from_json(empty, "f.json").numel() == 0);
}
