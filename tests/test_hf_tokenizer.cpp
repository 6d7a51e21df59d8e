// Hugging Face tokenizer.json reader and encoder (tasks/hf_tokenizer_reader.cpp, tasks/hf_tokenizer_encoder.cpp) against the reference library: the fixtures in
// tests/data/tokenizers were made by the `tokenizers` library itself (scripts/make_tokenizer_fixtures.py).
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <fstream>

#include "core/common.h"
#include "tasks/hf_tokenizer.h"
#include "tasks/tokenizer.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(MNEMO_SOURCE_DIR) / "tests" / "data" / "tokenizers";
const char* const kNames[] = {"gpt2", "llama3", "qwen2", "llama2", "mistral"};

std::vector<json> read_jsonl(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

const std::vector<std::string>& fixture_texts() {
  static const std::vector<std::string> texts = [] {
    std::vector<std::string> t;
    for (const json& r : read_jsonl(kFixtures / "texts.jsonl")) t.push_back(r.at("text").get<std::string>());
    return t;
  }();
  return texts;
}

// A copy of a fixture's tokenizer.json with `edit` applied, written to dir/name.json.
std::string edited_copy(const std::string& fixture, const fs::path& dir, const std::string& name,
                        const std::function<void(json&)>& edit) {
  json doc = read_json_file((kFixtures / fixture / "tokenizer.json").string());
  edit(doc);
  const std::string path = (dir / (name + ".json")).string();
  std::ofstream(path) << doc.dump();
  return path;
}

}  // namespace

TEST_CASE("tokenizer.json encodings equal the tokenizers library's on every fixture line", "[tokenizer]") {
  const auto& texts = fixture_texts();
  REQUIRE(texts.size() > 500);
  for (const char* name : kNames) {
    SECTION(name) {
      HfTokenizer tok((kFixtures / name).string());  // a folder holding tokenizer.json
      size_t encodes = 0, decodes = 0;
      for (const json& r : read_jsonl(kFixtures / name / "expected.jsonl")) {
        const auto want = r.at(r.contains("decode_ids") ? "decode_ids" : "ids").get<std::vector<int64_t>>();
        if (r.contains("decode_ids")) {  // decoding alone: split UTF-8 sequences, special ids
          INFO(name << " decode " << r.dump());
          CHECK(tok.decode(want) == r.at("decoded").get<std::string>());
          ++decodes;
          continue;
        }
        const std::string& text = texts.at(r.at("i").get<size_t>());
        INFO(name << " text " << json(text).dump());
        CHECK(tok.encode(text) == want);
        // decode(encode(x)) is the library's decoding (x itself unless normalization or <unk> changed it)
        CHECK(tok.decode(want) == (r.contains("decoded") ? r.at("decoded").get<std::string>() : text));
        ++encodes;
      }
      CHECK(encodes == texts.size());
      CHECK(decodes >= 50);
    }
  }
}

TEST_CASE("tokenizer.json special ids, identity and load_tokenizer", "[tokenizer]") {
  HfTokenizer llama2((kFixtures / "llama2" / "tokenizer.json").string());
  CHECK(llama2.bos_id() == 1);  // TemplateProcessing "<s> $A"
  CHECK(llama2.eos_id() == 2);  // </s>
  CHECK(llama2.vocab_size() == 2556);
  CHECK(llama2.id_to_token(3 + 0x0A) == "<0x0A>");
  CHECK(llama2.token_to_id("</s>") == 2);
  CHECK(llama2.encode_with_bos("Hi").front() == 1);
  CHECK(llama2.id().rfind("hf:llama2/tokenizer.json:", 0) == 0);
  CHECK(llama2.id().size() == std::string("hf:llama2/tokenizer.json:").size() + 12);

  HfTokenizer gpt2((kFixtures / "gpt2").string());
  CHECK(gpt2.bos_id() == -1);  // GPT-2 adds no BOS
  CHECK(gpt2.eos_id() == gpt2.token_to_id("<|endoftext|>"));
  CHECK(gpt2.pad_id() == gpt2.eos_id());
  // Special ids and ids past the vocabulary decode to nothing.
  CHECK(gpt2.decode({gpt2.eos_id(), 100000, -5}) == "");

  // Text that is not UTF-8 is read with each invalid sequence as U+FFFD.
  CHECK(gpt2.encode("a\xFF" "b") == gpt2.encode("a\xEF\xBF\xBD" "b"));
  CHECK(llama2.encode("\xE2\x82") == llama2.encode("\xEF\xBF\xBD"));

  // load_tokenizer: a folder or a .json path; the same file is shared.
  auto a = load_tokenizer((kFixtures / "llama3").string());
  auto b = load_tokenizer((kFixtures / "llama3" / "tokenizer.json").string());
  CHECK(a->id() == b->id());
  CHECK(a->bos_id() == a->encode_with_bos("x").front());
  const auto dir = test::temp_dir("hf_tok_config");
  fs::copy_file(kFixtures / "qwen2" / "tokenizer.json", dir / "tokenizer.json");
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"}})";
  HfTokenizer qwen(dir.string());
  CHECK(qwen.eos_id() == qwen.token_to_id("<|im_end|>"));
  CHECK(qwen.pad_id() == qwen.token_to_id("<|endoftext|>"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("bad tokenizer.json files give one error naming the file and the field", "[tokenizer]") {
  const auto dir = test::temp_dir("hf_tok_errors");
  auto error_of = [](const std::string& path) -> std::string {
    try {
      HfTokenizer t(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };

  std::string p = edited_copy("gpt2", dir, "no_model", [](json& d) { d.erase("model"); });
  std::string e = error_of(p);
  CHECK_THAT(e, Catch::Contains(p) && Catch::Contains("'model' is missing"));

  p = edited_copy("llama2", dir, "nfd", [](json& d) { d["normalizer"]["normalizers"][0] = {{"type", "NFD"}}; });
  CHECK(error_of(p) == p + ": tokenizer.json component 'NFD' is not supported (normalizer.normalizers[0]; mnemo "
                           "reads normalizers NFC, NFKC, Prepend, Replace, Sequence)");
  p = edited_copy("gpt2", dir, "wordpiece", [](json& d) { d["model"]["type"] = "WordPiece"; });
  CHECK_THAT(error_of(p), Catch::StartsWith(p + ": tokenizer.json component 'WordPiece' is not supported"));
  p = edited_copy("gpt2", dir, "bert_pre", [](json& d) { d["pre_tokenizer"] = {{"type", "BertPreTokenizer"}}; });
  CHECK_THAT(error_of(p), Catch::StartsWith(p + ": tokenizer.json component 'BertPreTokenizer' is not supported"));
  p = edited_copy("llama2", dir, "wp_dec", [](json& d) { d["decoder"]["decoders"][3] = {{"type", "WordPiece"}}; });
  CHECK_THAT(error_of(p), Catch::StartsWith(p + ": tokenizer.json component 'WordPiece' is not supported") &&
                              Catch::Contains("decoder.decoders[3]"));
  p = edited_copy("llama3", dir, "roberta", [](json& d) { d["post_processor"] = {{"type", "RobertaProcessing"}}; });
  CHECK_THAT(error_of(p), Catch::StartsWith(p + ": tokenizer.json component 'RobertaProcessing' is not supported"));

  p = edited_copy("gpt2", dir, "merge_form", [](json& d) { d["model"]["merges"][3] = "Ġt"; });
  CHECK_THAT(error_of(p), Catch::Contains(p + ": model.merges[3]: expected \"a b\""));
  p = edited_copy("llama3", dir, "merge_pair", [](json& d) { d["model"]["merges"][5] = json::array({"x"}); });
  CHECK_THAT(error_of(p), Catch::Contains(p + ": model.merges[5]: expected"));
  p = edited_copy("llama3", dir, "merge_unknown", [](json& d) { d["model"]["merges"][0] = {"Ġ", "zzzq"}; });
  CHECK_THAT(error_of(p), Catch::Contains(p + ": model.merges[0]: \"zzzq\" is not in model.vocab"));
  p = edited_copy("llama3", dir, "bad_regex", [](json& d) {
    d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  });
  CHECK_THAT(error_of(p), Catch::Contains(p + ": pre_tokenizer.pretokenizers[0].pattern: regex") &&
                              Catch::Contains("does not compile"));
  p = edited_copy("gpt2", dir, "vocab_id", [](json& d) { d["model"]["vocab"]["Ġthe"] = "x"; });
  CHECK_THAT(error_of(p), Catch::Contains(p + ": model.vocab.Ġthe: expected an id in [0, 4194303], got \"x\""));

  // Duplicate keys: the JSON reader refuses them (an object naming a key twice would keep the last silently).
  const std::string dup = (dir / "dup.json").string();
  std::ofstream(dup) << R"({"model": {"type": "BPE", "vocab": {"a": 0, "a": 1}, "merges": []}})";
  CHECK_THAT(error_of(dup), Catch::Contains("dup.json") && Catch::Contains("duplicate key 'a'"));
  const std::string broken = (dir / "broken.json").string();
  std::ofstream(broken) << R"({"model": {"type": "BPE", "vocab": )";
  CHECK_THAT(error_of(broken), Catch::Contains("broken.json"));
  CHECK_THAT(error_of(dir.string()), Catch::Contains("no tokenizer.json"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("mnemo tokenizer encode reads a tokenizer.json and benchmarks a file", "[tokenizer]") {
  const std::string spec = (kFixtures / "llama3").string();
  auto r = test::run_mnemo("tokenizer encode " + spec + " 'Hello world'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json out = json::parse(r.output);
  HfTokenizer tok(spec);
  CHECK(out.at("ids").get<std::vector<int64_t>>() == tok.encode("Hello world"));
  CHECK(out.at("decoded") == "Hello world");

  const auto dir = test::temp_dir("hf_tok_cli");
  const std::string file = (dir / "text.txt").string();
  std::ofstream(file) << "one line\nanother line\n";
  r = test::run_mnemo("tokenizer encode " + spec + " --file " + file + " --bench");
  REQUIRE(r.exit_code == 0);
  const json bench = json::parse(r.output);
  CHECK(bench.at("lines") == 3);
  CHECK(bench.at("tokens").get<size_t>() == tok.encode("one line").size() + tok.encode("another line").size());
  CHECK(bench.at("mb_per_s").get<double>() > 0);
  r = test::run_mnemo("tokenizer encode " + spec + " --bench 'x'");
  CHECK(r.exit_code != 0);
  CHECK(r.output.find("mnemo: error: tokenizer encode: --bench needs --file FILE") != std::string::npos);
  r = test::run_mnemo("tokenizer info " + (kFixtures / "mistral" / "tokenizer.json").string());
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("\"bos_id\":1") != std::string::npos);
  mnemo::test::remove_dir_tree(dir);
}
