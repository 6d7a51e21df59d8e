#include "tasks/lm_task.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>


namespace mnemo {
namespace fs = std::filesystem;

namespace {

std::string inputs_label(const CorpusSpec& c) {
  std::string out;
  for (const auto& in : c.inputs) {
    fs::path p(in);
    std::string name = p.filename().string();
    if (name.empty()) name = p.parent_path().filename().string();
    out += (out.empty() ? "" : "+") + name;
  }
  return out;
}

CorpusSpec corpus_from_params(const json& p, const std::string& key) {
  json j = {{"corpus", p.at(key)},
            {"doc_split", p.at("doc_split")},
            {"text_field", p.at("text_field")},
            {"val_every", p.at("val_every")},
            {"strip_gutenberg", p.at("strip_gutenberg")}};
  return CorpusSpec::from_json(j);
}

}  // namespace

LmTask::LmTask(const json& params, std::string name) : params_(params), name_(std::move(name)) {
  const int64_t T = seq_len();
  if (T < 2) throw Error("task " + name_ + ": seq_len must be >= 2, got " + std::to_string(T));
  const std::string sampler = params_.at("sampler");
  if (sampler != "random" && sampler != "sequential")
    throw Error("task " + name_ + ": sampler must be \"random\" or \"sequential\", got \"" + sampler + "\"");
  if (params_.at("val_tokens").get<int64_t>() < 0)
    throw Error("task " + name_ + ": val_tokens must be >= 0 (0 = the whole validation set)");
  if (params_.at("val_every").get<int64_t>() < 0) throw Error("task " + name_ + ": val_every must be >= 0");
  if (params_.at("corpus").get<std::string>().empty()) throw Error("task " + name_ + ": corpus is empty");
}

CorpusSpec LmTask::train_corpus() const { return corpus_from_params(params_, "corpus"); }

CorpusSpec LmTask::validation_corpus() const {
  const std::string val = params_.at("val_corpus");
  if (val.empty()) return train_corpus();
  CorpusSpec c = corpus_from_params(params_, "val_corpus");
  c.val_every = 0;
  return c;
}

CorpusSplit LmTask::validation_split() const {
  return params_.at("val_corpus").get<std::string>().empty() ? CorpusSplit::validation : CorpusSplit::all;
}

std::string LmTask::cache_dir() const {
  const std::string d = params_.at("cache_dir");
  if (!d.empty()) return d;
  if (const char* env = std::getenv("MNEMO_CACHE_DIR"); env && *env) return env;
  return "out/cache";
}

std::shared_ptr<Tokenizer> LmTask::tokenizer(const LogFn& log) const {
  const std::string spec = params_.at("tokenizer");
  if (is_corpus_tokenizer_spec(spec)) {
    // SentencePiece trained on the training documents only (never on the held-out ones).
    CorpusSpec c = train_corpus();
    if (!params_.at("val_corpus").get<std::string>().empty()) c.val_every = 0;  // every document trains
    return load_tokenizer(ensure_corpus_tokenizer(c, spec, cache_dir(), log));
  }
  return load_tokenizer(spec);
}

LmData LmTask::prepare(const LogFn& log, bool with_train, std::shared_ptr<Tokenizer> tok) const {
  LmData d;
  d.tokenizer = tok ? std::move(tok) : tokenizer(log);
  if (params_.at("reset_state_at_bos").get<bool>() && d.tokenizer->bos_id() < 0)
    throw Error("task " + name_ + ": reset_state_at_bos needs a tokenizer with a BOS token; " + d.tokenizer->id() +
                " has none");
  const CorpusSpec train = train_corpus();
  d.corpus_label = inputs_label(train);
  if (with_train) {
    d.train = TokenShard::open(ensure_token_shard(train, train.val_every > 0 && params_.at("val_corpus").get<std::string>().empty()
                                                             ? CorpusSplit::train
                                                             : CorpusSplit::all,
                                                  *d.tokenizer, cache_dir(), log));
    if (d.train->size() < seq_len() + 1)
      throw Error("task " + name_ + ": the training corpus " + d.corpus_label + " has " +
                  std::to_string(d.train->size()) + " tokens, fewer than seq_len + 1 = " + std::to_string(seq_len() + 1));
  }
  const CorpusSpec val = validation_corpus();
  d.validation = TokenShard::open(ensure_token_shard(val, validation_split(), *d.tokenizer, cache_dir(), log));
  d.validation_label = validation_split() == CorpusSplit::validation
                           ? inputs_label(val) + " (held out: every " + std::to_string(val.val_every) + "th document)"
                           : inputs_label(val);
  d.byte_lengths = token_byte_lengths(*d.tokenizer);
  return d;
}

std::vector<json> LmTask::generate_rows(Split split, int64_t n, uint64_t seed) const {
  LmData d = prepare({}, split == Split::train);
  const TokenShard& shard = split == Split::train ? *d.train : *d.validation;
  const int64_t T = seq_len(), windows = (shard.size() - 1) / T;
  std::vector<json> rows;
  std::vector<int64_t> ids(size_t(T + 1));
  for (int64_t i = 0; i < n && i < windows; ++i) {
    const int64_t w = int64_t((seed + uint64_t(i)) % uint64_t(windows));
    shard.read(w * T, T + 1, ids.data());
    rows.push_back({{"start", w * T},
                    {"input_ids", std::vector<int64_t>(ids.begin(), ids.end() - 1)},
                    {"labels", std::vector<int64_t>(ids.begin() + 1, ids.end())},
                    {"text", sanitize_utf8(d.tokenizer->decode(ids))}});
  }
  return rows;
}

// ---- lm_ppl ----

json LmPplTask::eval_options_help() const {
  return {{"lengths", "evaluation lengths L (default: the training seq_len); each cuts the stream into blocks of L"},
          {"max_tokens", "tokens of the validation stream to score (default max(65536, 4 x the longest length))"},
          {"bucket", "position bucket size for the longest length (default 2048, or the longest length / 8 if smaller)"},
          {"chunk", "tokens fed per forward through the model's state (default: the training seq_len; 0 = whole)"},
          {"batch_size", "blocks per forward (default 1)"}};
}

double LmPplTask::score_prediction(const json&, const std::string&, const std::string& where) const {
  throw Error(where + ": lm_ppl scores a model's log-likelihoods, not predictions (use mnemo eval --task lm_ppl)");
}

// ---- registration ----

namespace {
json lm_defaults() {
  return {{"corpus", "corpus/gutenberg"},
          {"doc_split", "auto"},
          {"text_field", "text"},
          {"val_every", 10},
          {"strip_gutenberg", true},
          {"val_corpus", ""},
          {"tokenizer", "byte"},
          {"seq_len", 512},
          {"sampler", "random"},
          {"packing", true},
          {"reset_state_at_bos", false},
          {"val_tokens", 65536},
          {"cache_dir", ""}};
}
json lm_help() {
  return {{"corpus", "text corpus: folders (one document per .txt file), .txt files (see doc_split) or .jsonl "
                     "(field text_field); comma-separated; relative to the working or the data directory"},
          {"doc_split", "documents of a .txt file given directly: auto (= blank_line), blank_line, line, file"},
          {"text_field", "JSONL field holding the document text"},
          {"val_every", "document i (0-based, in file-name order) is held out when (i+1) % val_every == 0 "
                        "(Gutenberg: every 10th book); 0 = none"},
          {"strip_gutenberg", "keep only the text between Project Gutenberg's START/END markers"},
          {"val_corpus", "a separate validation corpus (all its documents); empty = the held-out documents"},
          {"tokenizer", "byte | byte:plain | a SentencePiece .model | sp-bpe:N / sp-unigram:N (trained by mnemo "
                        "on the training documents, cached)"},
          {"seq_len", "training context T (windows of T + 1 tokens)"},
          {"sampler", "random (seeded random windows) | sequential (consecutive windows, epoch after epoch)"},
          {"packing", "windows cross document boundaries (true) or lie inside one document (false)"},
          {"reset_state_at_bos", "read every document of a packed window from a fresh state (BOS starts a sequence)"},
          {"val_tokens", "validation tokens scored at each evaluation (0 = all)"},
          {"cache_dir", "token shards and trained tokenizers (default $MNEMO_CACHE_DIR or out/cache)"}};
}
}  // namespace

void register_lm_tasks(TaskRegistry& r) {
  TaskFamily lm;
  lm.name = "lm";
  lm.description = "language-model pretraining on a text corpus (docs/tasks.md#language-modelling): validation ppl / bits per byte";
  lm.defaults = lm_defaults();
  lm.help = lm_help();
  lm.trainable = true;
  lm.make = [](const json& p) -> std::shared_ptr<Task> { return std::make_shared<LmTask>(p); };
  r.add(std::move(lm));

  TaskFamily ppl;
  ppl.name = "lm_ppl";
  ppl.description = "perplexity per evaluation length and per position bucket (length extrapolation, docs/tasks.md#language-modelling)";
  ppl.defaults = lm_defaults();
  ppl.help = lm_help();
  ppl.trainable = false;
  ppl.evaluation = "token_logprobs";
  ppl.make = [](const json& p) -> std::shared_ptr<Task> { return std::make_shared<LmPplTask>(p); };
  r.add(std::move(ppl));
}

}  // namespace mnemo
