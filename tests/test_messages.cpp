// Messages: every bad input listed here ends in one `mnemo: error: ...` line that names the
// option, key or file at fault, with exit status 1 (items 6, 8, 12, 13, 14). All cases stop before training.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/common.h"
#include "core/config_values.h"
#include "engine/config/config_checks.h"
#include "engine/evaluation/evaluate.h"
#include "engine/config/run_config.h"
#include "engine/tools/sweep.h"
#include "runtime/ops/fixture.h"
#include "runtime/registry.h"
#include "tasks/harness/task_common.h"
#include "tasks/tokenizer.h"
#include "tests/test_util.h"
#include "file_util.h"

using namespace mnemo;
using mnemo::test::run_mnemo;
using mnemo::test::temp_dir;

namespace {

// Exit 1 and exactly one line, starting "mnemo: error: ", that contains `what`.
void require_cli_error(const mnemo::test::CommandResult& r, const std::string& what) {
  CAPTURE(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.rfind("mnemo: error: ", 0) == 0);
  CHECK(r.output.find('\n') == r.output.size() - 1);  // one line
  CHECK_THAT(r.output, Catch::Contains(what));
}

void write_file(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

const char* kTiny = "--model transformer --task mqar --set d_model=32 --set n_layers=1 --set n_heads=2 --set seq_len=32 "
                    "--set num_kv_pairs=2 --set vocab_size=64 --set batch_size=16 --set n_train=200 --set n_test=32 "
                    "--set steps=2 --quiet";

}  // namespace

TEST_CASE("command-line parse errors: one `mnemo: error:` line, exit 1, bounds said plainly", "[messages][cli]") {
  auto dir = temp_dir("msg_parse");
  const std::string out = (dir / "x.jsonl").string();
  require_cli_error(run_mnemo("generate mqar --n 0 --seed 0 --out " + out), "--n must be >= 1, got 0");
  require_cli_error(run_mnemo("sweep --config " + out + " --jobs 0"), "--jobs must be >= 1, got 0");
  require_cli_error(run_mnemo("quickstart --jobs -2"), "--jobs must be >= 1, got -2");
  require_cli_error(run_mnemo("train --bogus 1"), "unexpected argument(s): --bogus");
  require_cli_error(run_mnemo("train --bogus 1"), "mnemo train --help");
  require_cli_error(run_mnemo("score --task sniah_1"), "--predictions is required");
  require_cli_error(run_mnemo("generate mqar --n 1e12 --seed 0 --out " + out), "--n expects an integer, got '1e12'");
  require_cli_error(run_mnemo("run learnability --setting 7 --memory x"), "--setting must be in [1, 5], got 7");
  // --help is not an error
  auto help = run_mnemo("train --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Catch::Contains("--stop-after"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("global options are accepted after the subcommand too", "[messages][cli]") {
  auto dir = temp_dir("msg_global");
  auto r = run_mnemo("models --data-dir " + dir.string());
  CAPTURE(r.output);
  CHECK(r.exit_code == 0);
  CHECK(run_mnemo("models --debug").exit_code == 0);
  CHECK(run_mnemo("--debug models").exit_code == 0);
  // the data dir given after `train` is the one used (and train's own errors follow the same format)
  require_cli_error(run_mnemo("train --data-dir " + dir.string() + " --model transformer --task nope --db " +
                              (dir / "r.sqlite").string()),
                    "unknown task 'nope'");
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("out-of-range command-line values and environment are refused", "[messages][cli]") {
  require_cli_error(run_mnemo(std::string("train ") + kTiny + " --stop-after -3"), "--stop-after must be >= 0, got -3");
  ::setenv("MNEMO_THREADS", "abc", 1);  // inherited by the child
  auto r = run_mnemo("models");
  ::unsetenv("MNEMO_THREADS");
  require_cli_error(r, "$MNEMO_THREADS must be a positive integer");
  CHECK_THAT(r.output, Catch::Contains("'abc'"));
}

TEST_CASE("bench prints the d_model it measures when --set d_model is given", "[messages][cli]") {
  auto r = run_mnemo("bench --model transformer --set d_model=64 --n-layers 1 --seq-lens 8 --warmup 0 --repeats 1 "
                     "--no-db");
  CAPTURE(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("d_model 64,"));
}

TEST_CASE("files: a folder, an overflowing number, generate --out DIR and a huge --n name the file", "[messages][cli]") {
  auto dir = temp_dir("msg_files");
  const auto folder = dir / "folder";
  std::filesystem::create_directories(folder);
  require_cli_error(run_mnemo("train --config " + folder.string()), folder.string() + " is a directory");
  require_cli_error(run_mnemo("score --task sniah_1 --predictions " + folder.string()), "is a directory");

  write_file(dir / "big.json", R"({"model": "transformer", "task": "mqar", "lr": 1e999})");
  auto big = run_mnemo("train --config " + (dir / "big.json").string());
  require_cli_error(big, (dir / "big.json").string());
  CHECK_THAT(big.output, Catch::Contains("1e999") && !Catch::Contains("[json.exception"));
  require_cli_error(run_mnemo(std::string("train ") + kTiny + " --set lr=1e999"), "config key 'lr': the number 1e999");

  auto gen = run_mnemo("generate mqar --n 3 --seed 0 --out " + folder.string());
  require_cli_error(gen, "--out " + folder.string() + " is a directory");
  CHECK_FALSE(std::filesystem::exists(folder.string() + ".tmp"));
  require_cli_error(run_mnemo("generate mqar --n 1000000000000 --seed 0 --out " + (dir / "x.jsonl").string()),
                    "at most 10000000 examples");
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("config values: integers, ranges and finite numbers name the key", "[messages][config]") {
  // Integer-typed keys refuse 1.5 in words (resolve_run_config's type rule).
  CHECK(expected_type_name(json(1000)) == "number (an integer)");
  CHECK(expected_type_name(json(0.5)) == "number");
  CHECK_FALSE(value_fits_default(json(1000), json(1.5)));
  CHECK_THROWS_WITH(resolve_run_config({{"model", "transformer"}, {"task", "mqar"}, {"steps", 1.5}}),
                    Catch::Contains("'steps' expects a number (an integer)"));
  CHECK_THROWS_WITH(key_value_pairs_to_json({"lr=1e999"}), Catch::Contains("'lr'") && Catch::Contains("1e999"));

  const json base = resolve_run_config({{"model", "transformer"}, {"task", "mqar"}});
  CHECK_NOTHROW(validate_run_config(base));
  auto refused = [&](const std::string& key, const json& value, const std::string& what) {
    json cfg = base;
    cfg[key] = value;
    CAPTURE(key, value.dump());
    CHECK_THROWS_WITH(validate_run_config(cfg), Catch::Contains("config key '" + key + "'") && Catch::Contains(what));
  };
  refused("steps", 0, "must be >= 1, got 0");
  refused("steps", 1.5, "expects a number (an integer), got 1.5");
  refused("eval_every", -5, "must be >= 1, got -5");
  refused("log_every", 0, ">= 1");
  refused("batch_size", 0, ">= 1");
  refused("eval_batch_size", 0, "must be >= 1, got 0");
  refused("n_train", -1, ">= 0");
  refused("lr", -1, "must be > 0, got -1");
  refused("lr", 0, "> 0");
  refused("beta1", 1.5, "must be in [0, 1), got 1.5");
  refused("beta2", 1.0, "in [0, 1)");
  refused("adam_eps", 0, "> 0");
  refused("weight_decay", -0.1, ">= 0");
  refused("grad_clip", -1, "must be >= 0, got -1");
  refused("warmup_frac", 5, "must be in [0, 1], got 5");
  refused("min_lr_ratio", -1, "must be in [0, 1], got -1");
  refused("early_stop_acc", 2, "in [0, 1]");
  refused("mlp_ratio", 0, "must be > 0, got 0");
  refused("d_model", 0, ">= 1");
  refused("n_heads", 0, ">= 1");
  refused("n_layers", 0, ">= 1");
  json ok = base;
  ok["grad_clip"] = 0;  // 0 = off
  ok["early_stop_acc"] = 0;
  ok["n_train"] = 0;
  CHECK_NOTHROW(validate_run_config(ok));
}

TEST_CASE("the typed key table: every default is valid, and only run-watching keys leave the hash", "[messages][config]") {
  std::set<std::string> names;
  for (const RunKey& k : run_keys()) {
    CAPTURE(k.name);
    CHECK(names.insert(k.name).second);  // each key once
    CHECK_FALSE(k.help.empty());
  }
  const json base = resolve_run_config({{"model", "transformer"}, {"task", "mqar"}});
  CHECK_NOTHROW(validate_run_config(base));  // every default lies in its range
  CHECK(training_defaults().size() + skeleton_defaults().size() == run_keys().size());
  for (const RunKey& k : run_keys()) {
    if (!k.range || k.name == "model" || k.name == "task") continue;
    json moved = base;  // a value just past the lower bound: the hash of the run changes unless the key is watching-only
    moved[k.name] = k.range->lo + (k.range->integer ? 1.0 : 0.5);
    if (k.range->integer) moved[k.name] = static_cast<int64_t>(k.range->lo) + 2;
    CAPTURE(k.name, moved[k.name].dump());
    CHECK((config_hash(moved) == config_hash(base)) == (!k.hashed));
  }
}

TEST_CASE("every argument of every mixer has a meaning (its family's or the shared glossary's)", "[messages][config]") {
  auto& reg = Registry::instance();
  for (const auto& name : reg.mixer_names()) {
    const MixerFamily& m = reg.mixer(name);
    for (auto it = m.defaults.begin(); it != m.defaults.end(); ++it) {
      CAPTURE(name, it.key());
      CHECK_FALSE(mixer_arg_meaning(m, it.key()).empty());
    }
    for (const auto& [arg, meaning] : m.traits.arg_meanings) {  // no meaning for an argument the family lacks
      CAPTURE(name, arg);
      CHECK(m.defaults.contains(arg));
    }
  }
}

TEST_CASE("sweep files that are not an object, or with a non-string name, are named", "[messages][sweep]") {
  CHECK_THROWS_WITH(expand_sweep(json::array({1, 2})), Catch::Contains("must be a JSON object") &&
                                                           Catch::Contains("an array"));
  CHECK_THROWS_WITH(expand_sweep(json()), Catch::Contains("must be a JSON object") && Catch::Contains("null"));
  CHECK_THROWS_WITH(expand_sweep({{"name", 5}}), Catch::Contains("sweep field 'name' must be a string, got 5"));
}

TEST_CASE("a sweep grid value that is an object sets its key with its own settings", "[messages][sweep]") {
  const json sweep = json::parse(R"({"base": {"task": "lm", "chunk_size": 64},
    "cases": [{"d_model": 64}, {"d_model": 96}],
    "grid": {"model": ["gated_deltanet", {"model": "mamba3", "mamba_mimo_rank": 4, "chunk_size": 32}]}})");
  const std::vector<json> cells = expand_sweep(sweep);
  REQUIRE(cells.size() == 4);
  for (int c = 0; c < 2; ++c) {
    const json& plain = cells[2 * c];
    const json& variant = cells[2 * c + 1];
    CHECK(plain.at("model") == "gated_deltanet");
    CHECK(plain.at("chunk_size") == 64);
    CHECK_FALSE(plain.contains("mamba_mimo_rank"));
    CHECK(variant.at("model") == "mamba3");
    CHECK(variant.at("mamba_mimo_rank") == 4);
    CHECK(variant.at("chunk_size") == 32);  // the value's own setting wins over base
    CHECK(plain.at("d_model") == variant.at("d_model"));
  }
  CHECK(cells[0].at("d_model") == 64);
  CHECK(cells[2].at("d_model") == 96);
  // An object that does not set its axis's key would silently keep the base's (or no) value: refused, named.
  CHECK_THROWS_WITH(expand_sweep(json::parse(R"({"grid": {"model": ["gla", {"mamba_mimo_rank": 4}]}})")),
                    Catch::Contains("sweep grid key 'model'") && Catch::Contains("must set 'model' itself") &&
                        Catch::Contains("mamba_mimo_rank"));
}

TEST_CASE("tokenizer train on a text too small for the vocabulary is an error, not a crash", "[messages][tokenizer]") {
  auto dir = temp_dir("msg_tok");
  const std::string text = (dir / "t.txt").string();
  write_file(text, "the quick brown fox jumps over the lazy dog\n");
  // SentencePiece's BPE trainer segfaulted here (rc 139)
  auto r = run_mnemo("tokenizer train --input " + text + " --vocab-size 100 --model-type bpe --out " +
                     (dir / "tk" / "t").string());
  require_cli_error(r, text);
  CHECK_THAT(r.output, Catch::Contains("--vocab-size 100") && Catch::Contains("at most"));
  // far beyond what the text holds: refused before SentencePiece runs
  auto big = run_mnemo("tokenizer train --input " + text + " --vocab-size 8000 --model-type bpe --out " +
                       (dir / "tk" / "t").string());
  require_cli_error(big, "--vocab-size 8000");
  CHECK_THAT(big.output, Catch::Contains("at most"));
  // a vocabulary the text supports still trains
  auto ok = run_mnemo("tokenizer train --input " + text + " --vocab-size 40 --model-type bpe --out " +
                      (dir / "tk" / "t").string());
  CAPTURE(ok.output);
  CHECK(ok.exit_code == 0);
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("check-kernel refuses a fixture that lacks an output of its op", "[messages][fixtures]") {
  const auto source = std::filesystem::path(fixtures_dir()) / "gla__seed1__T16.json";
  if (!std::filesystem::exists(source)) {
    WARN("no fixture " << source << "; skipped");
    return;
  }
  auto dir = temp_dir("msg_fixture");
  json j = read_json_file(source.string());
  j["outputs"].erase("final_state");
  j["tolerance_hint"].erase("final_state");
  const std::string path = (dir / "gla_no_state.json").string();
  std::ofstream(path) << j.dump();
  auto r = run_mnemo("check-kernel " + path);
  CAPTURE(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("mnemo: error: ") && Catch::Contains(path) &&
                           Catch::Contains("outputs.final_state"));
  CHECK_THROWS_WITH(check_fixture(load_fixture(path), KernelOpRegistry::instance().at("gla"), {16}),
                    Catch::Contains(path) && Catch::Contains("outputs.final_state"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("a JSON object that names a key twice is refused, naming the key and the file", "[messages][json]") {
  // nlohmann keeps the last value: `"lr": 0.001 ... "lr": 0.5` would train at 0.5 without a word
  CHECK_THROWS_WITH(parse_json_text(R"({"lr": 0.001, "steps": 2, "lr": 0.5})", "run.json"),
                    Catch::Contains("duplicate key 'lr'") && Catch::Contains("run.json"));
  CHECK_THROWS_WITH(parse_json_text(R"({"model": {"d": 1, "mixer": {"x": 1, "x": 2}}})", "run.json"),
                    Catch::Contains("duplicate key 'x'") && Catch::Contains("model.mixer"));
  // the same key in sibling objects, and in an array's objects, is no duplicate
  CHECK(parse_json_text(R"([{"a": 1}, {"a": 2}, {"b": {"a": 3}}])", "f.json").size() == 3);
  // one line of a task's data file (JSON Lines): the record is malformed
  const auto lines = harness::parse_jsonl("{\"q\": 1}\n{\"q\": 1, \"q\": 2}\n", "valid.jsonl", /*keep_malformed=*/true);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].error.empty());
  CHECK_THAT(lines[1].error, Catch::Contains("duplicate key 'q'"));
  CHECK_THROWS_WITH(harness::parse_jsonl("{\"q\": 1, \"q\": 2}\n", "valid.jsonl"), Catch::Contains("valid.jsonl:1"));

  auto dir = temp_dir("msg_dupkey");
  const std::string config = (dir / "run.json").string();
  write_file(config, R"({"model": "transformer", "task": "mqar", "lr": 0.001, "steps": 2, "lr": 0.5})");
  auto r = run_mnemo("train --config " + config + " --db " + (dir / "r.db").string() + " --quiet");
  require_cli_error(r, "duplicate key 'lr' in " + config);
  CHECK_FALSE(std::filesystem::exists(dir / "r.db"));  // refused before anything is written
  const std::string sweep = (dir / "sweep.json").string();
  write_file(sweep, R"({"name": "s", "base": {"model": "transformer"}, "name": "t"})");
  require_cli_error(run_mnemo("sweep --config " + sweep), "duplicate key 'name' in " + sweep);
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("deeply nested JSON is one short error, and errors quote a value only in part", "[messages][json]") {
  // at ~70 000 levels the process crashed (SIGSEGV) with no message
  CHECK_THROWS_WITH(parse_json_text(std::string(70000, '[') + std::string(70000, ']'), "deep.json"),
                    Catch::Contains("nested deeper than 256 levels") && Catch::Contains("deep.json"));
  CHECK_NOTHROW(parse_json_text(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']'), "ok.json"));
  CHECK(json_excerpt(json(std::string(100000, 'x'))).size() < 70);
  CHECK(json_excerpt(json("short")) == "\"short\"");
  CHECK(text_excerpt("\xc3\xa9\xc3\xa9", 3) == "\xc3\xa9\u2026");  // not cut inside a UTF-8 character

  auto dir = temp_dir("msg_deep");
  const std::string deep = (dir / "deep.json").string();
  write_file(deep, "{\"model\": " + std::string(70000, '[') + std::string(70000, ']') + "}");
  auto r = run_mnemo("train --config " + deep + " --quiet");
  require_cli_error(r, "nested deeper than 256 levels");
  CHECK(r.output.size() < 200);
  // 200 levels pass the reader; the key's error quotes the value's first characters, not 100 KB of it
  const std::string wide = (dir / "wide.json").string();
  write_file(wide, "{\"model\": \"transformer\", \"task\": \"mqar\", \"lr\": \"" + std::string(100000, 'x') + "\"}");
  auto w = run_mnemo("train --config " + wide + " --quiet");
  CAPTURE(w.output);
  CHECK(w.exit_code == 1);
  CHECK_THAT(w.output, Catch::Contains("lr") && Catch::Contains("\u2026"));
  CHECK(w.output.size() < 300);
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("eval: a --tokenizer other than the checkpoint's is refused, naming both, unless allowed", "[messages][tokenizer]") {
  auto dir = temp_dir("msg_other_tok");
  // Two SentencePiece models of the same vocabulary size, trained on different text: the size check alone passed them.
  auto train = [&](const std::string& name, const std::string& text) {
    write_file(dir / (name + ".txt"), text);
    SentencePieceTrainOptions o;
    o.inputs = {(dir / (name + ".txt")).string()};
    o.vocab_size = 40;
    o.out_prefix = (dir / name).string();
    return train_sentencepiece(o);
  };
  std::string a_text, b_text;
  for (int i = 0; i < 40; ++i) {
    a_text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
    b_text += "pack my box with five dozen liquor jugs " + std::to_string(i) + "\n";
  }
  const std::string a = train("a", a_text), b = train("b", b_text);
  REQUIRE(load_tokenizer(a)->vocab_size() == load_tokenizer(b)->vocab_size());
  const json cfg = {{"model", "transformer"}, {"task", "lm"}, {"tokenizer", a}};
  const auto quiet = [](const std::string&) {};
  CHECK_THROWS_WITH(checkpoint_tokenizer(cfg, b, "RUN", false, quiet),
                    Catch::Contains("checkpoint RUN was trained with tokenizer '" + a + "'") &&
                        Catch::Contains("not --tokenizer '" + b + "'") && Catch::Contains("--allow-other-tokenizer"));
  // the checkpoint's own tokenizer, under another path to the same file, is no other tokenizer
  const std::string copy = (dir / "copy.model").string();
  std::filesystem::copy_file(a, copy);
  CHECK_FALSE(checkpoint_tokenizer(cfg, copy, "RUN", false, quiet).other);
  CHECK_FALSE(checkpoint_tokenizer(cfg, "", "RUN", false, quiet).other);
  const auto allowed = checkpoint_tokenizer(cfg, b, "RUN", true, quiet);
  REQUIRE(allowed.other);
  CHECK(allowed.tokenizer->id() == load_tokenizer(b)->id());
  // ... and then its evals rows carry the tokenizer in their cell, so they do not replace the checkpoint's own rows
  ResultsDB db((dir / "r.sqlite").string());
  EvalCell cell;
  cell.task = "piqa";
  cell.metric = "acc";
  cell.setting = {{"suite", "lm-eval"}};
  cell.value = 0.5;
  cell.n = 2;
  eval_rows_sink(db, "transformer", "RUN", 0)({cell});
  eval_rows_sink(db, "transformer", "RUN", 0, false, {{"tokenizer", allowed.tokenizer->id()}})({cell});
  const auto rows = db.evals("piqa");
  REQUIRE(rows.size() == 2);
  CHECK(json::parse(rows[1].setting_json)["tokenizer"] == allowed.tokenizer->id());
  mnemo::test::remove_dir_tree(dir);
}
