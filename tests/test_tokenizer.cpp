#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/common.h"
#include "tasks/tokenizer.h"
#include "test_util.h"

using namespace mnemo;

namespace {
// A small training slice: the first 2,000 lines of Tiny Shakespeare (fast to train on).
std::string write_training_slice(const std::filesystem::path& dir) {
  const std::string text = read_text_file(data_path("corpus/tinyshakespeare.txt"));
  size_t pos = 0;
  for (int i = 0; i < 2000 && pos != std::string::npos; ++i) pos = text.find('\n', pos + 1);
  const std::string path = (dir / "slice.txt").string();
  std::ofstream(path) << text.substr(0, pos);
  return path;
}
}  // namespace

TEST_CASE("byte tokenizer round-trips bytes and handles specials", "[tokenizer]") {
  ByteTokenizer tok;
  CHECK(tok.vocab_size() == 258);
  CHECK(tok.bos_id() == 256);
  CHECK(tok.eos_id() == 257);
  CHECK(tok.pad_id() == 257);
  CHECK(tok.id() == "byte");
  const std::string text = "Hello, world!\nna\xC3\xAFve caf\xC3\xA9 \xE2\x80\x99";
  const auto ids = tok.encode(text);
  CHECK(ids.size() == text.size());
  CHECK(ids[0] == 'H');
  CHECK(tok.decode(ids) == text);
  const auto with_bos = tok.encode_with_bos("ab");
  CHECK(with_bos == std::vector<int64_t>{256, 'a', 'b'});
  // Specials and out-of-vocabulary ids decode to nothing.
  CHECK(tok.decode({256, 'o', 'k', 257, 9999, -1}) == "ok");
  // A cut inside a UTF-8 character decodes to U+FFFD, never to invalid UTF-8.
  CHECK(tok.decode({'a', 0xC3}) == "a\xEF\xBF\xBD");

  ByteTokenizer plain(false);
  CHECK(plain.vocab_size() == 256);
  CHECK(plain.bos_id() == -1);
  CHECK(plain.eos_id() == -1);
  CHECK(plain.pad_id() == 0);
  CHECK(plain.encode_with_bos("a") == std::vector<int64_t>{'a'});
  CHECK(load_tokenizer("byte")->id() == "byte");
  CHECK(load_tokenizer("byte:plain")->id() == "byte:plain");
}

TEST_CASE("UTF-8 helpers repair and trim byte strings", "[tokenizer]") {
  CHECK(sanitize_utf8("abc") == "abc");
  CHECK(sanitize_utf8("\xE2\x80\x99") == "\xE2\x80\x99");
  CHECK(sanitize_utf8("a\xFF" "b") == "a\xEF\xBF\xBD" "b");
  CHECK(sanitize_utf8("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  CHECK(sanitize_utf8("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  CHECK(trim_incomplete_utf8("ab\xE2\x80") == "ab");
  CHECK(trim_incomplete_utf8("ab\xE2\x80\x99") == "ab\xE2\x80\x99");
  CHECK(trim_incomplete_utf8("ab\xC3") == "ab");
  CHECK(trim_incomplete_utf8("abc") == "abc");
}

TEST_CASE("sentencepiece train -> encode -> decode round trip", "[tokenizer]") {
  const auto dir = test::temp_dir("sp_train");
  SentencePieceTrainOptions o;
  o.inputs = {write_training_slice(dir)};
  o.vocab_size = 300;
  o.model_type = "bpe";
  o.out_prefix = (dir / "bpe").string();
  const std::string model = train_sentencepiece(o);
  REQUIRE(std::filesystem::exists(model));
  REQUIRE(std::filesystem::exists(o.out_prefix + ".vocab"));

  auto tok = load_tokenizer(model);
  CHECK(tok->vocab_size() == 300);
  CHECK(tok->bos_id() == 1);
  CHECK(tok->eos_id() == 2);
  CHECK(tok->id().rfind("sp:bpe.model:", 0) == 0);
  CHECK(tok->id().size() == std::string("sp:bpe.model:").size() + 12);
  for (const std::string text : {"First Citizen: Before we proceed any further, hear me speak.",
                                 "What authority surfeits on would relieve us.", "All: Speak, speak."}) {
    const auto ids = tok->encode(text);
    CHECK(ids.size() < text.size());  // merges happened
    for (auto id : ids) CHECK((id >= 0 && id < 300));
    CHECK(tok->decode(ids) == text);
  }
  // Control ids are skipped when decoding; BOS is prepended by encode_with_bos.
  auto ids = tok->encode_with_bos("hear me");
  CHECK(ids.front() == 1);
  ids.push_back(2);
  CHECK(tok->decode(ids) == "hear me");

  o.model_type = "unigram";
  o.out_prefix = (dir / "uni").string();
  auto uni = load_tokenizer(train_sentencepiece(o));
  CHECK(uni->decode(uni->encode("Speak, speak.")) == "Speak, speak.");
  CHECK(uni->id() != tok->id());
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("tokenizer errors name the file or value at fault", "[tokenizer]") {
  const auto dir = test::temp_dir("sp_errors");
  CHECK_THROWS_WITH(load_tokenizer("no/such/tokenizer.model"), Catch::Contains("no/such/tokenizer.model"));
  CHECK_THROWS_AS(load_tokenizer(""), Error);
  const std::string corrupt = (dir / "corrupt.model").string();
  std::ofstream(corrupt) << "this is not a sentencepiece model";
  CHECK_THROWS_WITH(load_tokenizer(corrupt), Catch::Contains("corrupt.model"));

  SentencePieceTrainOptions o;
  o.inputs = {(dir / "missing.txt").string()};
  o.out_prefix = (dir / "x").string();
  CHECK_THROWS_WITH(train_sentencepiece(o), Catch::Contains("missing.txt"));
  o.inputs = {write_training_slice(dir)};
  o.model_type = "wordpiece";
  CHECK_THROWS_WITH(train_sentencepiece(o), Catch::Contains("wordpiece"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("mnemo tokenizer train / info on the command line", "[tokenizer]") {
  const auto dir = test::temp_dir("sp_cli");
  const std::string input = write_training_slice(dir);
  const std::string prefix = (dir / "cli").string();
  auto r = test::run_mnemo("tokenizer train --input " + input + " --vocab-size 256 --model-type bpe --out " + prefix);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("\"vocab_size\":256") != std::string::npos);
  r = test::run_mnemo("tokenizer info " + prefix + ".model");
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("sp:cli.model:") != std::string::npos);
  r = test::run_mnemo("tokenizer train --input " + input + " --vocab-size 256 --model-type foo --out " + prefix);
  CHECK(r.exit_code != 0);
  mnemo::test::remove_dir_tree(dir);
}
