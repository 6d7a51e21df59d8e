// Corpora and token shards for language-model pretraining (docs/tasks.md#language-modelling).
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "core/common.h"
#include "core/signals.h"
#include "tasks/corpus.h"
#include "tasks/text_utils.h"
#include "tasks/token_shard.h"
#include "tasks/tokenizer.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

CorpusSpec corpus_of(std::vector<std::string> inputs, int64_t val_every = 0, const std::string& doc_split = "auto") {
  CorpusSpec c;
  c.inputs = std::move(inputs);
  c.val_every = val_every;
  c.doc_split = doc_split;
  return c;
}

struct Doc {
  int64_t index;
  std::string name, text;
  bool operator==(const Doc& o) const { return index == o.index && name == o.name && text == o.text; }
};
std::ostream& operator<<(std::ostream& os, const Doc& d) {
  return os << "{" << d.index << ", " << d.name << ", " << json(d.text).dump() << "}";
}
std::vector<Doc> documents(const CorpusSpec& c, CorpusSplit split = CorpusSplit::all) {
  std::vector<Doc> out;
  const int64_t n = for_each_document(c, split, [&](int64_t i, const std::string& name, const std::string& text) {
    out.push_back({i, name, text});
  });
  CHECK(n == static_cast<int64_t>(out.size()));
  return out;
}

std::vector<std::string> texts(const std::vector<Doc>& docs) {
  std::vector<std::string> out;
  for (const auto& d : docs) out.push_back(d.text);
  return out;
}

std::vector<int64_t> all_tokens(const TokenShard& s) {
  std::vector<int64_t> out(static_cast<size_t>(s.size()));
  s.read(0, s.size(), out.data());
  return out;
}

struct Log {
  std::vector<std::string> lines;
  std::function<void(const std::string&)> fn() {
    return [this](const std::string& l) { lines.push_back(l); };
  }
  bool has(const std::string& s) const {
    for (const auto& l : lines)
      if (l.find(s) != std::string::npos) return true;
    return false;
  }
};

// Three one-document files: "hi", "abc", "xyz".
fs::path three_files(const fs::path& root) {
  const fs::path dir = root / "docs";
  fs::create_directories(dir);
  write_file(dir / "b.txt", "abc");
  write_file(dir / "a.txt", "hi");
  write_file(dir / "c.txt", "xyz");
  return dir;
}

}  // namespace

TEST_CASE("corpus folder: .txt/.jsonl files in name order, one document per .txt file", "[corpus]") {
  const auto dir = test::temp_dir("corpus_folder");
  write_file(dir / "b.txt", "beta");
  write_file(dir / "a.txt", "alpha\n\nsecond para\n");
  write_file(dir / "c.md", "not a corpus file");
  write_file(dir / "d.txt", "  \n\n");  // empty: skipped, takes no index
  write_file(dir / "e.jsonl", "{\"text\": \"from jsonl\"}\n");
  const CorpusSpec c = corpus_of({dir.string()});
  const auto docs = documents(c);
  REQUIRE(docs.size() == 3);
  CHECK(docs[0] == Doc{0, "a.txt", "alpha\n\nsecond para\n"});
  CHECK(docs[1] == Doc{1, "b.txt", "beta"});
  CHECK(docs[2] == Doc{2, "e.jsonl#0", "from jsonl"});

  const auto files = list_corpus_files(c);
  REQUIRE(files.size() == 4);
  CHECK(fs::path(files[1].path).filename() == "b.txt");
  CHECK(files[1].bytes == 4);
  CHECK(files[1].sha256 == sha256_hex("beta"));

  // Inside a folder, "line" / "blank_line" split the .txt files too.
  CHECK(texts(documents(corpus_of({dir.string()}, 0, "blank_line"))) ==
        std::vector<std::string>{"alpha", "second para", "beta", "from jsonl"});
  CHECK(documents(corpus_of({dir.string()}, 0, "line"))[1].name == "a.txt#1");
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("corpus .txt file: blank_line (auto), line and file splits", "[corpus]") {
  const auto dir = test::temp_dir("corpus_splits");
  const std::string t = (dir / "t.txt").string();
  write_file(t, "one\ntwo\n\n\nthree\n  \nfour\n");
  const auto paras = documents(corpus_of({t}));
  CHECK(texts(paras) == std::vector<std::string>{"one\ntwo", "three", "four"});
  CHECK(paras[2].name == "t.txt#2");
  CHECK(texts(documents(corpus_of({t}, 0, "blank_line"))) == texts(paras));
  CHECK(texts(documents(corpus_of({t}, 0, "line"))) == std::vector<std::string>{"one", "two", "three", "four"});
  const auto whole = documents(corpus_of({t}, 0, "file"));
  CHECK(whole == std::vector<Doc>{{0, "t.txt", "one\ntwo\n\n\nthree\n  \nfour\n"}});
  // Two inputs: listing order is input order, the index runs over both.
  const auto both = documents(corpus_of({t, t}, 0, "line"));
  REQUIRE(both.size() == 8);
  CHECK(both[7].index == 7);
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("corpus JSONL: one document per line, errors name file:line and field", "[corpus]") {
  const auto dir = test::temp_dir("corpus_jsonl");
  const std::string good = (dir / "good.jsonl").string();
  write_file(good, "{\"text\": \"a\", \"id\": 1}\n{\"text\": \"\"}\n\n{\"body\": \"x\", \"text\": \"b\\r\\nc\"}\n");
  CHECK(texts(documents(corpus_of({good}))) == std::vector<std::string>{"a", "b\nc"});
  CHECK(documents(corpus_of({good}))[1].name == "good.jsonl#1");

  CorpusSpec body = corpus_of({good});
  body.text_field = "body";
  CHECK_THROWS_WITH(documents(body), Catch::Contains("good.jsonl':1") && Catch::Contains("\"body\" is missing"));
  const std::string bad = (dir / "bad.jsonl").string();
  write_file(bad, "{\"text\": \"ok\"}\n{\"text\": \"broken\n");
  CHECK_THROWS_WITH(documents(corpus_of({bad})), Catch::Contains("bad.jsonl':2") && Catch::Contains("malformed"));
  write_file(bad, "{\"text\": 5}\n");
  CHECK_THROWS_WITH(documents(corpus_of({bad})), Catch::Contains("bad.jsonl':1") && Catch::Contains("not a string"));
  write_file(bad, "[1, 2]\n");
  CHECK_THROWS_AS(documents(corpus_of({bad})), Error);
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("corpus text: CRLF -> LF, BOM dropped, Project Gutenberg header/footer stripped", "[corpus]") {
  const auto dir = test::temp_dir("corpus_crlf");
  const std::string t = (dir / "w.txt").string();
  write_file(t, "\xEF\xBB\xBF" "first\r\nline\r\n\r\nsecond\r\n");
  CHECK(texts(documents(corpus_of({t}))) == std::vector<std::string>{"first\nline", "second"});
  CHECK(texts(documents(corpus_of({t}, 0, "file"))) == std::vector<std::string>{"first\nline\n\nsecond\n"});
  const std::string j = (dir / "w.jsonl").string();
  write_file(j, "\xEF\xBB\xBF{\"text\": \"x\"}\r\n{\"text\": \"y\"}\r\n");
  CHECK(texts(documents(corpus_of({j}))) == std::vector<std::string>{"x", "y"});

  const std::string pg = (dir / "pg.txt").string();
  const std::string raw =
      "The Project Gutenberg EBook of Tests\r\n\r\n*** START OF THIS PROJECT GUTENBERG EBOOK TESTS ***\r\n\r\n"
      "Body text here.\r\n\r\nMore body.\r\n\r\n*** END OF THIS PROJECT GUTENBERG EBOOK TESTS ***\r\nLicence text\r\n";
  write_file(pg, raw);
  const auto stripped = texts(documents(corpus_of({pg}, 0, "file")));
  REQUIRE(stripped.size() == 1);
  CHECK(stripped[0] == gutenberg_body(raw));
  CHECK(stripped[0].find("Body text here.\n\nMore body.") != std::string::npos);
  CHECK(stripped[0].find("Licence") == std::string::npos);
  CHECK(stripped[0].find('\r') == std::string::npos);
  CorpusSpec keep = corpus_of({pg}, 0, "file");
  keep.strip_gutenberg = false;
  CHECK(texts(documents(keep))[0].find("Licence text") != std::string::npos);
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("corpus split: every val_every-th document is held out", "[corpus]") {
  const auto dir = test::temp_dir("corpus_val");
  const std::string t = (dir / "t.txt").string();
  std::string lines;
  for (int i = 0; i < 25; ++i) lines += "d" + std::to_string(i) + "\n\n";
  write_file(t, lines);
  const CorpusSpec c = corpus_of({t}, 10);
  const auto val = documents(c, CorpusSplit::validation);
  REQUIRE(val.size() == 2);
  CHECK(val[0] == Doc{9, "t.txt#9", "d9"});
  CHECK(val[1] == Doc{19, "t.txt#19", "d19"});
  const auto train = documents(c, CorpusSplit::train);
  CHECK(train.size() == 23);
  for (const auto& d : train) CHECK((d.index != 9 && d.index != 19));
  CHECK(documents(c, CorpusSplit::all).size() == 25);
  CHECK(validation_document_names(c) == std::vector<std::string>{"t.txt#9", "t.txt#19"});
  CHECK(validation_document_names(corpus_of({t}, 0)).empty());

  CHECK_THROWS_WITH(documents(corpus_of({t}, 0), CorpusSplit::validation),
                    Catch::Contains("no held-out documents (val_every=0 over 25 documents)"));
  CHECK_THROWS_WITH(documents(corpus_of({t}, 30), CorpusSplit::validation), Catch::Contains("val_every=30"));
  CHECK_THROWS_WITH(documents(corpus_of({t}, 1), CorpusSplit::train), Catch::Contains("no training documents"));
  CHECK(documents(corpus_of({t}, 0), CorpusSplit::train).size() == 25);
  write_file(dir / "empty.txt", "\n \n\n");
  CHECK_THROWS_WITH(documents(corpus_of({(dir / "empty.txt").string()})), Catch::Contains("has no documents"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("corpus spec: JSON keys and bad inputs", "[corpus]") {
  const auto dir = test::temp_dir("corpus_spec");
  CorpusSpec c = CorpusSpec::from_json({{"corpus", "a.txt, b"}, {"val_every", 5}, {"doc_split", "line"}, {"lr", 1}});
  CHECK(c.inputs == std::vector<std::string>{"a.txt", "b"});
  CHECK(c.val_every == 5);
  CHECK(c.doc_split == "line");
  CHECK(c.text_field == "text");
  CHECK(c.strip_gutenberg);
  const CorpusSpec back = CorpusSpec::from_json(c.to_json());
  CHECK(back.to_json() == c.to_json());
  CHECK(CorpusSpec::from_json({{"corpus", {"x,y"}}}).inputs == std::vector<std::string>{"x,y"});
  CHECK_THROWS_WITH(CorpusSpec::from_json({{"val_every", 5}}), Catch::Contains("corpus"));
  CHECK_THROWS_WITH(CorpusSpec::from_json({{"corpus", "a,,b"}}), Catch::Contains("a,,b"));
  CHECK_THROWS_WITH(CorpusSpec::from_json({{"corpus", "a"}, {"val_every", -1}}), Catch::Contains("val_every"));
  CHECK_THROWS_WITH(CorpusSpec::from_json({{"corpus", "a"}, {"doc_split", "para"}}), Catch::Contains("para"));
  CHECK_THROWS_WITH(CorpusSpec::from_json({{"corpus", "a"}, {"strip_gutenberg", "yes"}}), Catch::Contains("strip_gutenberg"));

  CHECK_THROWS_WITH(list_corpus_files(corpus_of({(dir / "nope.txt").string()})), Catch::Contains("nope.txt"));
  fs::create_directories(dir / "empty_folder");
  write_file(dir / "empty_folder" / "readme.md", "x");
  CHECK_THROWS_WITH(list_corpus_files(corpus_of({(dir / "empty_folder").string()})),
                    Catch::Contains("no .txt or .jsonl"));
  write_file(dir / "x.csv", "a,b");
  CHECK_THROWS_WITH(list_corpus_files(corpus_of({(dir / "x.csv").string()})), Catch::Contains("unknown extension '.csv'"));
  write_file(dir / "ok.txt", "x");
  CHECK_THROWS_WITH(list_corpus_files(corpus_of({(dir / "ok.txt").string()}, 0, "para")), Catch::Contains("para"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("token shard: [BOS] + bytes + [EOS] per document, header, document starts", "[corpus]") {
  const auto root = test::temp_dir("shard_bytes");
  const fs::path docs = three_files(root);
  const std::string cache = (root / "cache").string();
  Log log;
  const std::string path = ensure_token_shard(corpus_of({docs.string()}), CorpusSplit::all, ByteTokenizer(), cache, log.fn());
  CHECK(fs::path(path).parent_path() == fs::path(cache) / "shards");
  CHECK(fs::path(path).filename().string().rfind("all-", 0) == 0);
  CHECK(fs::path(path).filename().string().size() == std::string("all-").size() + 16 + 4);
  auto s = TokenShard::open(path);
  CHECK(all_tokens(*s) == std::vector<int64_t>{256, 'h', 'i', 257, 256, 'a', 'b', 'c', 257, 256, 'x', 'y', 'z', 257});
  CHECK(s->document_starts() == std::vector<int64_t>{0, 4, 9});
  CHECK(s->token(5) == 'a');
  const json& h = s->header();
  CHECK(h.at("format") == 1);
  CHECK(h.at("tokenizer") == "byte");
  CHECK(h.at("vocab_size") == 258);
  CHECK(h.at("bos_id") == 256);
  CHECK(h.at("eos_id") == 257);
  CHECK(h.at("dtype") == "uint16");
  CHECK(h.at("split") == "all");
  CHECK(h.at("n_tokens") == 14);
  CHECK(h.at("n_documents") == 3);
  CHECK(h.at("n_text_bytes") == 8);
  CHECK(h.at("token_checksum").get<std::string>().size() == 16);
  CHECK(h.at("corpus") == corpus_of({docs.string()}).to_json());
  REQUIRE(h.at("files").size() == 3);
  CHECK(h.at("files")[0].at("sha256") == sha256_hex("hi"));
  CHECK((fs::file_size(path) - 28) % 8 == 0);  // tokens start on an 8-byte boundary
  int64_t out[3];
  CHECK_THROWS_WITH(s->read(12, 3, out), Catch::Contains("outside [0, 14)"));
  CHECK_THROWS_AS(s->token(14), Error);
  CHECK_THROWS_AS(s->token(-1), Error);
  TokenShard moved = std::move(*s);
  CHECK(moved.size() == 14);
  CHECK(moved.token(13) == 257);

  // byte:plain: no specials, one stream, one start.
  const std::string plain = ensure_token_shard(corpus_of({docs.string()}), CorpusSplit::all, ByteTokenizer(false), cache, nullptr);
  CHECK(plain != path);
  auto p = TokenShard::open(plain);
  CHECK(all_tokens(*p) == std::vector<int64_t>{'h', 'i', 'a', 'b', 'c', 'x', 'y', 'z'});
  CHECK(p->document_starts() == std::vector<int64_t>{0});

  // Held-out split: val_every = 3 keeps the third document.
  const std::string val = ensure_token_shard(corpus_of({docs.string()}, 3), CorpusSplit::validation, ByteTokenizer(), cache, nullptr);
  CHECK(fs::path(val).filename().string().rfind("validation-", 0) == 0);
  CHECK(all_tokens(*TokenShard::open(val)) == std::vector<int64_t>{256, 'x', 'y', 'z', 257});
  const std::string train = ensure_token_shard(corpus_of({docs.string()}, 3), CorpusSplit::train, ByteTokenizer(), cache, nullptr);
  CHECK(TokenShard::open(train)->header().at("n_documents") == 2);
  CHECK(TokenShard::open(train)->document_starts() == std::vector<int64_t>{0, 4});
  // A split without documents is an error and leaves no file behind.
  const auto before = std::distance(fs::directory_iterator(fs::path(cache) / "shards"), fs::directory_iterator());
  CHECK_THROWS_WITH(ensure_token_shard(corpus_of({docs.string()}, 0), CorpusSplit::validation, ByteTokenizer(), cache, nullptr),
                    Catch::Contains("no held-out documents"));
  CHECK(std::distance(fs::directory_iterator(fs::path(cache) / "shards"), fs::directory_iterator()) == before);
  mnemo::test::remove_dir_tree(root);
}

TEST_CASE("token shard: reused when unchanged, rebuilt when the corpus, tokenizer or file changes", "[corpus]") {
  const auto root = test::temp_dir("shard_reuse");
  const fs::path docs = three_files(root);
  const std::string cache = (root / "cache").string();
  const CorpusSpec c = corpus_of({docs.string()});
  Log log;
  const std::string path = ensure_token_shard(c, CorpusSplit::all, ByteTokenizer(), cache, log.fn());
  struct stat st1 {}, st2 {};
  REQUIRE(::stat(path.c_str(), &st1) == 0);
  const auto mtime = fs::last_write_time(path);
  Log again;
  CHECK(ensure_token_shard(c, CorpusSplit::all, ByteTokenizer(), cache, again.fn()) == path);
  REQUIRE(::stat(path.c_str(), &st2) == 0);
  CHECK(st1.st_ino == st2.st_ino);
  CHECK(fs::last_write_time(path) == mtime);
  CHECK(again.has("reusing"));

  // Another tokenizer spec: another shard.
  CHECK(ensure_token_shard(c, CorpusSplit::all, *load_tokenizer("byte:plain"), cache, nullptr) != path);
  // One file's content changes: a new shard with the new text.
  write_file(docs / "b.txt", "abd");
  Log changed;
  const std::string rebuilt = ensure_token_shard(c, CorpusSplit::all, ByteTokenizer(), cache, changed.fn());
  CHECK(rebuilt != path);
  CHECK(changed.has("b.txt changed"));
  CHECK(TokenShard::open(rebuilt)->token(7) == 'd');

  // A corrupted token byte: open() refuses it, ensure_token_shard rebuilds it in place.
  {
    std::fstream f(rebuilt, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(rebuilt)) - 3);
    f.put('Q');
  }
  CHECK_THROWS_WITH(TokenShard::open(rebuilt), Catch::Contains("corrupted") && Catch::Contains(rebuilt));
  CHECK_NOTHROW(TokenShard::open(rebuilt, false));
  Log fixed;
  CHECK(ensure_token_shard(c, CorpusSplit::all, ByteTokenizer(), cache, fixed.fn()) == rebuilt);
  CHECK(fixed.has("rebuilding"));
  CHECK(fixed.has("corrupted"));
  CHECK_NOTHROW(TokenShard::open(rebuilt));

  // Truncated: an Error naming the file, then rebuilt.
  fs::resize_file(rebuilt, fs::file_size(rebuilt) - 2);
  CHECK_THROWS_WITH(TokenShard::open(rebuilt), Catch::Contains("truncated") && Catch::Contains(rebuilt));
  Log truncated;
  ensure_token_shard(c, CorpusSplit::all, ByteTokenizer(), cache, truncated.fn());
  CHECK(truncated.has("truncated"));
  CHECK(TokenShard::open(rebuilt)->size() == 14);
  write_file(rebuilt, "MNEMO");
  CHECK_THROWS_WITH(TokenShard::open(rebuilt), Catch::Contains("truncated"));
  write_file(rebuilt, "not a token shard at all");
  CHECK_THROWS_WITH(TokenShard::open(rebuilt), Catch::Contains("bad magic"));
  CHECK_THROWS_WITH(TokenShard::open((root / "missing.bin").string()), Catch::Contains("missing.bin"));

  // A stop signal while building: an Error, no shard and no temporary file.
  fs::remove(rebuilt);
  request_stop(SIGINT);
  CHECK_THROWS_WITH(ensure_token_shard(c, CorpusSplit::all, ByteTokenizer(), cache, nullptr), Catch::Contains("interrupted"));
  clear_stop_request();
  CHECK_FALSE(fs::exists(rebuilt));
  for (const auto& e : fs::directory_iterator(fs::path(cache) / "shards"))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
  mnemo::test::remove_dir_tree(root);
}

TEST_CASE("token_byte_lengths of the byte tokenizers", "[corpus]") {
  const auto with = token_byte_lengths(ByteTokenizer());
  REQUIRE(with.size() == 258);
  CHECK(with[0] == 1);
  CHECK(with[255] == 1);
  CHECK(with[256] == 0);
  CHECK(with[257] == 0);
  const auto plain = token_byte_lengths(ByteTokenizer(false));
  REQUIRE(plain.size() == 256);
  for (int32_t n : plain) CHECK(n == 1);
}

TEST_CASE("corpus-trained SentencePiece: cached, round-trips, byte lengths add up", "[corpus]") {
  const auto root = test::temp_dir("corpus_sp");
  const fs::path dir = root / "text";
  fs::create_directories(dir);
  const std::vector<std::string> words = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to",
                                          "his", "red", "ball", "under", "old", "tree", "while", "birds", "sang", "loudly"};
  SampleRng rng(7);
  std::vector<std::string> sentences;
  for (int f = 0; f < 4; ++f) {
    std::string text;
    for (int i = 0; i < 100; ++i) {
      std::string s;
      const int64_t n = rng.between(4, 10);
      for (int64_t w = 0; w < n; ++w) s += (w ? " " : "") + words[rng.below(words.size())];
      s += ".";
      sentences.push_back(s);
      text += s + "\n";
    }
    write_file(dir / ("part" + std::to_string(f) + ".txt"), text);
  }
  const CorpusSpec c = corpus_of({dir.string()}, 4, "line");
  const std::string cache = (root / "cache").string();
  Log log;
  const std::string model = ensure_corpus_tokenizer(c, "sp-bpe:300", cache, log.fn());
  CHECK(fs::path(model).parent_path() == fs::path(cache) / "tokenizers");
  CHECK(fs::path(model).extension() == ".model");
  CHECK(log.has("training SentencePiece bpe on 300 of 300 paragraphs"));  // the 100 held-out lines are not used
  const auto mtime = fs::last_write_time(model);
  Log again;
  CHECK(ensure_corpus_tokenizer(c, "sp-bpe:300", cache, again.fn()) == model);
  CHECK(fs::last_write_time(model) == mtime);
  CHECK(again.has("reusing"));
  for (const auto& e : fs::directory_iterator(fs::path(cache) / "tokenizers")) {
    const std::string name = e.path().filename().string();
    CHECK((name.find(".tmp.") == std::string::npos && name.find(".train.") == std::string::npos));
  }
  CHECK(is_corpus_tokenizer_spec("sp-unigram:500"));
  CHECK_FALSE(is_corpus_tokenizer_spec("byte"));
  CHECK_THROWS_WITH(ensure_corpus_tokenizer(c, "sp-bpe:lots", cache, nullptr), Catch::Contains("sp-bpe:lots"));

  SentencePieceTokenizer tok(model);
  CHECK(tok.vocab_size() == 300);
  const std::string& sentence = sentences[5];
  const auto ids = tok.encode(sentence);
  CHECK(tok.decode(ids) == sentence);
  const auto lengths = token_byte_lengths(tok);
  REQUIRE(lengths.size() == 300);
  CHECK(lengths[tok.bos_id()] == 0);
  CHECK(lengths[tok.eos_id()] == 0);
  CHECK(lengths[0] == 0);  // <unk>
  CHECK(tok.is_unknown(0));
  CHECK(tok.is_control(tok.bos_id()));
  int bytes_pieces = 0;
  for (int64_t i = 0; i < tok.vocab_size(); ++i)
    if (tok.is_byte_piece(i)) {
      ++bytes_pieces;
      CHECK(tok.id_to_piece(i).rfind("<0x", 0) == 0);
      CHECK(lengths[i] == 1);
    }
  CHECK(bytes_pieces == 256);
  CHECK_THROWS_AS(tok.id_to_piece(300), Error);
  // SentencePiece's dummy prefix: the first piece carries a U+2581 standing for the space before the first word.
  auto byte_sum = [&](const std::vector<int64_t>& v) {
    int64_t n = 0;
    for (int64_t id : v) n += lengths[id];
    return n;
  };
  CHECK(byte_sum(ids) == static_cast<int64_t>((" " + sentence).size()));
  const std::string accented = "the caf\xC3\xA9 sat.";  // é is not in the training text: two byte pieces
  CHECK(tok.decode(tok.encode(accented)) == accented);
  CHECK(byte_sum(tok.encode(accented)) == static_cast<int64_t>((" " + accented).size()));

  // A shard under this tokenizer: [BOS] + pieces + [EOS] per line, decoding back to the line.
  const std::string shard = ensure_token_shard(c, CorpusSplit::validation, tok, cache, nullptr);
  auto s = TokenShard::open(shard);
  CHECK(s->header().at("tokenizer") == tok.id());
  CHECK(s->header().at("n_documents") == 100);
  const auto& starts = s->document_starts();
  REQUIRE(starts.size() == 100);
  const int64_t end0 = starts[1];
  std::vector<int64_t> first(static_cast<size_t>(end0));
  s->read(0, end0, first.data());
  CHECK(first.front() == tok.bos_id());
  CHECK(first.back() == tok.eos_id());
  CHECK(tok.decode(first) == sentences[3]);  // document 3 is the first held out (val_every 4)
  mnemo::test::remove_dir_tree(root);
}
