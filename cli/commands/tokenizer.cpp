// `mnemo tokenizer train --input FILE... --vocab-size N --model-type bpe|unigram --out PREFIX`
// trains a SentencePiece model with SentencePiece's own trainer; `mnemo tokenizer info SPEC` and
// `mnemo tokenizer encode SPEC TEXT|--file F [--bench]` inspect a tokenizer ("byte", "byte:plain", a .model or a
// Hugging Face tokenizer.json); --bench times encoding a file line by line on one thread.
#include <algorithm>
#include <iostream>

#include "cli/commands/commands.h"
#include "tasks/tokenizer.h"

namespace mnemo::cli {

namespace {
json tokenizer_info(const Tokenizer& t) {
  return {{"id", t.id()}, {"vocab_size", t.vocab_size()}, {"bos_id", t.bos_id()}, {"eos_id", t.eos_id()},
          {"pad_id", t.pad_id()}};
}
}  // namespace

void add_tokenizer_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenizer", "Train (SentencePiece) or inspect tokenizers");
  cmd->require_subcommand(1);

  static SentencePieceTrainOptions train_opts;
  auto* train = cmd->add_subcommand("train", "Train a SentencePiece BPE/unigram model; writes PREFIX.model/.vocab");
  train->add_option("--input", train_opts.inputs, "Training text files (one or more)")->required();
  train->add_option("--vocab-size", train_opts.vocab_size, "Vocabulary size")->required();
  train->add_option("--model-type", train_opts.model_type, "bpe | unigram")
      ->check(CLI::IsMember({"bpe", "unigram"}));
  train->add_option("--out", train_opts.out_prefix, "Output prefix (PREFIX.model, PREFIX.vocab)")->required();
  train->add_option("--character-coverage", train_opts.character_coverage, "Character coverage (default 1.0)");
  train->add_option("--input-sentence-size", train_opts.input_sentence_size,
                    "Sample this many lines for training (0 = all)");
  train->add_option("--max-sentence-length", train_opts.max_sentence_length, "Longest line in bytes (default 16384)");
  train->add_flag("--byte-fallback", train_opts.byte_fallback, "Unknown characters fall back to byte pieces");
  train->callback([] {
    const std::string model = train_sentencepiece(train_opts);
    auto tok = load_tokenizer(model);
    json out = tokenizer_info(*tok);
    out["model"] = model;
    std::cout << out.dump() << "\n";
  });

  static std::string info_spec;
  auto* info = cmd->add_subcommand("info", "Print a tokenizer's id, vocabulary size and special ids as JSON");
  info->add_option("spec", info_spec, "\"byte\", \"byte:plain\", a .model path or a tokenizer.json (file or folder)")
      ->required();
  info->callback([] { std::cout << tokenizer_info(*load_tokenizer(info_spec)).dump() << "\n"; });

  static std::string enc_spec, enc_text, enc_file;
  static bool enc_bench = false;
  auto* enc = cmd->add_subcommand("encode", "Print the ids of TEXT (or of a file) and the decoding as JSON");
  enc->add_option("spec", enc_spec, "\"byte\", \"byte:plain\", a .model path or a tokenizer.json (file or folder)")
      ->required();
  enc->add_option("text", enc_text, "Text to encode");
  enc->add_option("--file", enc_file, "Encode this file's text instead of TEXT");
  enc->add_flag("--bench", enc_bench,
                "With --file: encode the file one line at a time (split at \\n, without it), print the speed "
                "(MB/s, tokens/s) instead of the ids");
  enc->callback([enc] {
    if (enc_file.empty() == (enc->count("text") == 0))
      throw Error("tokenizer encode: give either TEXT or --file FILE");
    if (enc_bench && enc_file.empty()) throw Error("tokenizer encode: --bench needs --file FILE");
    auto tok = load_tokenizer(enc_spec);
    const std::string text = enc_file.empty() ? enc_text : read_text_file(enc_file);
    if (!enc_bench) {
      const auto ids = tok->encode(text);
      std::cout << json{{"ids", ids}, {"n", ids.size()}, {"decoded", tok->decode(ids)}}.dump() << "\n";
      return;
    }
    std::vector<std::string> lines;
    for (size_t pos = 0;;) {
      const size_t nl = text.find('\n', pos);
      lines.push_back(text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
      if (nl == std::string::npos) break;
      pos = nl + 1;
    }
    const double start = wall_seconds();
    int64_t tokens = 0;
    for (const auto& line : lines) tokens += static_cast<int64_t>(tok->encode(line).size());
    const double seconds = std::max(wall_seconds() - start, 1e-9);
    std::cout << json{{"tokenizer", tok->id()},
                      {"file", enc_file},
                      {"bytes", text.size()},
                      {"lines", lines.size()},
                      {"tokens", tokens},
                      {"seconds", seconds},
                      {"mb_per_s", text.size() / 1e6 / seconds},
                      {"tokens_per_s", tokens / seconds},
                      {"threads", 1}}
                     .dump()
              << "\n";
  });
}

}  // namespace mnemo::cli
