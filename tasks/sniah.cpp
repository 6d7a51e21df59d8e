#include "tasks/sniah.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>

#include "tasks/scoring.h"

namespace mnemo {

namespace fs = std::filesystem;

namespace {

const char* kNoiseSentence = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

// RULER uuid.UUID(int=getrandbits(128), version=4): version nibble 4, variant bits 10.
std::string random_uuid4(SampleRng& rng) {
  uint8_t b[16];
  const uint64_t hi = rng.next(), lo = rng.next();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(hi >> (56 - 8 * i));
  for (int i = 0; i < 8; ++i) b[8 + i] = static_cast<uint8_t>(lo >> (56 - 8 * i));
  b[6] = static_cast<uint8_t>((b[6] & 0x0F) | 0x40);
  b[8] = static_cast<uint8_t>((b[8] & 0x3F) | 0x80);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s.push_back('-');
    s.push_back(hex[b[i] >> 4]);
    s.push_back(hex[b[i] & 0xF]);
  }
  return s;
}

struct WordLists {
  std::shared_ptr<const std::vector<std::string>> adjectives, nouns;
  std::string sha256;
};

const WordLists& load_word_lists(const std::string& dir_spec) {
  static std::mutex mutex;
  static std::map<std::string, WordLists> cache;
  const std::string dir = resolve_data_file(dir_spec, "S-NIAH wordlists");
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(dir);
  if (it != cache.end()) return it->second;
  const std::string adj = (fs::path(dir) / "adjectivelist.txt").string();
  const std::string noun = (fs::path(dir) / "nounlist.txt").string();
  WordLists w;
  w.adjectives = std::make_shared<const std::vector<std::string>>(read_word_list(adj));
  w.nouns = std::make_shared<const std::vector<std::string>>(read_word_list(noun));
  w.sha256 = sha256_hex(read_text_file(adj) + read_text_file(noun));
  return cache.emplace(dir, std::move(w)).first->second;
}

}  // namespace

struct SniahTask::Essay {
  std::vector<std::string> words;  // re.sub(r"\s+", " ", text).split(" ")
  std::string sha256, label;
};

const std::vector<int64_t>& ruler_depths() {
  static const std::vector<int64_t> depths = [] {
    std::vector<int64_t> d;
    for (int i = 0; i < 40; ++i) d.push_back(static_cast<int64_t>(std::nearbyint(100.0 * i / 39.0)));
    return d;
  }();
  return depths;
}

SniahTask::SniahTask(int variant, const json& p) : variant_(variant), params_(p) {
  if (variant < 1 || variant > 3) throw Error("S-NIAH: variant must be 1, 2 or 3, got " + std::to_string(variant));
  std::string haystack, wordlists;
  try {
    length_ = p.at("length").get<int64_t>();
    tokens_to_generate_ = p.at("tokens_to_generate").get<int64_t>();
    depth_ = p.at("depth").get<int64_t>();
    with_ids_ = p.at("with_ids").get<bool>();
    haystack = p.at("haystack").get<std::string>();
    wordlists = p.at("wordlists").get<std::string>();
  } catch (const json::exception& e) {
    throw Error(name() + ": bad parameters " + json_excerpt(p) + ": " + e.what());
  }
  if (tokens_to_generate_ < 1) throw Error(name() + ": tokens_to_generate must be >= 1");
  if (length_ <= tokens_to_generate_)
    throw Error(name() + ": length " + std::to_string(length_) + " must exceed tokens_to_generate " +
                std::to_string(tokens_to_generate_));
  if (depth_ != -1 && (depth_ < 0 || depth_ > 100))
    throw Error(name() + ": depth must be in 0..100 or -1 (random), got " + std::to_string(depth_));
  type_ = variant == 3 ? "uuid" : "number";
  tok_ = load_tokenizer(p.at("tokenizer").get<std::string>());

  const WordLists& w = load_word_lists(wordlists);
  adjectives_ = w.adjectives;
  nouns_ = w.nouns;
  wordlists_sha256_ = w.sha256;

  if (haystack == "noise") {
    haystack_label_ = "noise";
    haystack_sha256_ = sha256_hex(kNoiseSentence);
  } else {
    static std::mutex mutex;
    static std::map<std::string, std::shared_ptr<const Essay>> cache;
    auto corpus = TextCorpus::open(haystack);
    const std::string key = corpus->fingerprint() + corpus->label();
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = cache[key];
    if (!slot) {
      auto e = std::make_shared<Essay>();
      std::string text;
      for (size_t i = 0; i < corpus->size(); ++i) text += (i ? " " : "") + corpus->document(i);
      e->words = split_on_spaces(collapse_whitespace(text));
      e->sha256 = sha256_hex(text);
      e->label = corpus->label();
      slot = e;
    }
    essay_ = slot;
    haystack_label_ = "essay:" + essay_->label;
    haystack_sha256_ = essay_->sha256;
  }
}

std::string SniahTask::build_input(int64_t units, const std::string& key, const std::string& value, int64_t depth,
                                   double noise_position, int64_t* effective_depth) const {
  const std::string needle = "One of the special magic " + type_ + "s for " + key + " is: " + value + ".";
  std::string context;
  int64_t eff = depth;
  if (essay_) {
    // " ".join(haystack[:n]) (the word list repeated if too short), Punkt-style sentences, the
    // needle after int(len(sentences) * depth / 100) of them.
    const auto& words = essay_->words;
    std::string text;
    for (int64_t i = 0; i < units; ++i) {
      if (i) text.push_back(' ');
      text += words[static_cast<size_t>(i) % words.size()];
    }
    const auto sents = split_sentences(strip(text));
    const auto pos = static_cast<size_t>(static_cast<double>(sents.size()) * (static_cast<double>(depth) / 100.0));
    context = join(sents, " ", 0, pos) + " " + needle + " " + join(sents, " ", pos);
  } else {
    int64_t pos;
    if (depth >= 0) {
      pos = static_cast<int64_t>(static_cast<double>(units) * (static_cast<double>(depth) / 100.0));
    } else {  // RULER: random.sample(range(n), 1), the needle inserted before that item
      pos = static_cast<int64_t>(noise_position * static_cast<double>(units));
      eff = units > 0 ? static_cast<int64_t>(std::llround(100.0 * static_cast<double>(pos) / units)) : 0;
    }
    for (int64_t i = 0; i <= units; ++i) {
      if (i == pos) context += (context.empty() && i == 0 ? "" : "\n") + needle;
      if (i < units) context += (context.empty() ? "" : "\n") + std::string(kNoiseSentence);
    }
  }
  if (effective_depth) *effective_depth = eff;
  const std::string& t = type_;
  return "A special magic " + t + " is hidden within the following text. Make sure to memorize it. I will quiz you about the " +
         t + " afterwards.\n" + context + "\nWhat is the special magic " + t + " for " + key +
         " mentioned in the provided text? The special magic " + t + " for " + key + " mentioned in the provided text is";
}

SniahSample SniahTask::make_sample(Split split, int64_t index, uint64_t seed, int64_t max_seq_length, int64_t depth,
                                   const Tokenizer& tok) const {
  if (depth != -1 && (depth < 0 || depth > 100))
    throw Error(name() + ": depth must be in 0..100 or -1 (random), got " + std::to_string(depth));
  SampleRng rng(sample_seed(seed, index, split == Split::train));
  SniahSample s;
  s.key = (*adjectives_)[rng.below(adjectives_->size())] + "-" + (*nouns_)[rng.below(nouns_->size())];
  s.value = variant_ == 3 ? random_uuid4(rng) : std::to_string(rng.between(1000000, 9999999));
  const int64_t drawn_depth = ruler_depths()[rng.below(ruler_depths().size())];
  const double noise_position = rng.uniform();
  const int64_t d = depth >= 0 ? depth : (essay_ ? drawn_depth : -1);

  // Largest n with tokens(prompt(n)) <= budget: invariant f(lo) <= budget < f(hi).
  const int64_t budget = max_seq_length - tokens_to_generate_;
  auto f = [&](int64_t n) { return prompt_token_count(tok, build_input(n, s.key, s.value, d, noise_position)); };
  const int64_t f0 = f(0);
  if (f0 > budget)
    throw Error(name() + ": max_seq_length " + std::to_string(max_seq_length) + " is too small: the prompt without " +
                "haystack already needs " + std::to_string(f0) + " tokens plus " +
                std::to_string(tokens_to_generate_) + " to generate");
  const int64_t probe = essay_ ? 500 : 25;  // RULER's `incremental`
  const int64_t fp = f(probe);
  int64_t lo = 0, hi;
  if (fp > budget) {
    hi = probe;
  } else {
    const double per_unit = std::max(1e-3, static_cast<double>(fp - f0) / static_cast<double>(probe));
    const int64_t guess = probe + static_cast<int64_t>(static_cast<double>(budget - fp) / per_unit);
    int64_t step = std::max<int64_t>(1, guess / 64);
    if (f(guess) <= budget) {
      lo = guess;
      while (f(lo + step) <= budget) {
        lo += step;
        step *= 2;
        if (lo > 1000 * (budget + 1)) throw Error(name() + ": tokenizer yields no tokens for the haystack");
      }
      hi = lo + step;
    } else {
      lo = probe;
      hi = guess;
      while (hi - step > lo) {
        if (f(hi - step) > budget) {
          hi -= step;
          step *= 2;
        } else {
          lo = hi - step;
          break;
        }
      }
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (f(mid) <= budget ? lo : hi) = mid;
  }
  s.haystack_units = lo;
  s.build_depth = d;
  s.noise_position = noise_position;
  s.input = build_input(lo, s.key, s.value, d, noise_position, &s.depth);
  s.input_tokens = prompt_token_count(tok, s.input);
  return s;
}

std::vector<json> SniahTask::generate_rows(Split split, int64_t n, uint64_t seed) const {
  std::vector<json> rows;
  for (int64_t i = 0; i < n; ++i) {
    const SniahSample s = make_sample(split, i, seed, length_, depth_, *tok_);
    json row = {{"task", name()},
                {"index", i},
                {"input", s.input},
                {"outputs", {s.value}},
                {"target", s.value},
                {"key", s.key},
                {"depth", s.depth},
                {"length", length_},
                {"input_tokens", s.input_tokens},
                {"tokens_to_generate", tokens_to_generate_},
                {"haystack", haystack_label_},
                {"haystack_units", s.haystack_units},
                {"tokenizer", tok_->id()},
                {"split", split_name(split)}};
    if (with_ids_) row["input_ids"] = tok_->encode_with_bos(s.input);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<TokenExample> SniahTask::examples(Split split, int64_t n, uint64_t seed) const {
  std::vector<TokenExample> out;
  out.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const SniahSample s = make_sample(split, i, seed, length_, depth_, *tok_);
    auto ex = make_answer_example(*tok_, s.input, " " + s.value, length_);
    if (!ex)
      throw Error(name() + ": the answer does not fit in tokens_to_generate " + std::to_string(tokens_to_generate_));
    ex->meta = {{"task", name()}, {"depth", s.depth}, {"target", s.value}};
    out.push_back(std::move(*ex));
  }
  return out;
}

json SniahTask::eval_options_help() const {
  return {{"lengths", "max_seq_length values in tokens, e.g. 1024,2048,4096 (default: the task's length)"},
          {"depths", "needle depths in percent 0..100, or -1 for RULER's random depth (default: the task's depth)"},
          {"n", "samples per (length, depth) cell (default 500, RULER's)"},
          {"seed", "base seed; sample i uses seed + i (default 42)"},
          {"tokens_to_generate", "generation budget, also reserved in the length (default: the task's, 128)"},
          {"prefill_chunk", "prefill the prompt in chunks of this many tokens (0 = whole prompt)"}};
}

namespace {
// The references of a sample or prediction row: "outputs" (a list) or "target" (a string or a list).
std::vector<std::string> sniah_references(const json& row, const std::string& where) {
  const char* key = row.contains("outputs") ? "outputs" : "target";
  if (!row.contains(key)) throw Error(where + ": missing field \"outputs\" (or \"target\")");
  const json& v = row[key];
  std::vector<std::string> refs;
  if (v.is_string()) {
    refs.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const auto& r : v) {
      if (!r.is_string()) throw Error(where + ": field \"" + key + "\" must hold strings, got " + json_excerpt(r));
      refs.push_back(r.get<std::string>());
    }
  }
  if (refs.empty()) throw Error(where + ": field \"" + key + "\" must be a string or a non-empty list of strings");
  return refs;
}
}  // namespace

GenerationPlan SniahTask::generation_plan(const EvalContext& ctx) const {
  const auto tok = eval_tokenizer(ctx, params_.at("tokenizer").get<std::string>());
  const auto lengths = option_int_list(ctx.options, "lengths", {length_});
  const auto depths = option_int_list(ctx.options, "depths", {depth_});
  const int64_t n = option_int(ctx.options, "n", 500);
  const int64_t seed = option_int(ctx.options, "seed", 42);
  if (n < 1) throw Error(name() + ": eval option n must be >= 1");
  if (option_int(ctx.options, "tokens_to_generate", tokens_to_generate_) != tokens_to_generate_)
    throw Error(name() + ": set tokens_to_generate as a task parameter (it is part of the length budget)");
  for (int64_t depth : depths)
    if (depth != -1 && (depth < 0 || depth > 100))
      throw Error(name() + ": depth must be in 0..100 or -1 (random), got " + std::to_string(depth));
  GenerationPlan plan;
  plan.task = name();
  plan.metric = "string_match_all";
  plan.tokenizer = tok;
  plan.prefill_chunk = option_int(ctx.options, "prefill_chunk", 0);
  if (plan.prefill_chunk < 0) throw Error(name() + ": eval option prefill_chunk must be >= 0 (0 = the whole prompt)");
  plan.n_cells = static_cast<int64_t>(lengths.size() * depths.size());
  plan.cell = [this, tok, lengths, depths, n, seed](int64_t c) {
    const int64_t length = lengths[static_cast<size_t>(c) / depths.size()];
    const int64_t depth = depths[static_cast<size_t>(c) % depths.size()];
    GenerationCell cell;
    cell.setting = {{"length", length}, {"depth", depth}};
    cell.details = {{"tokenizer", tok->id()},          {"add_bos", tok->adds_bos()},
                    {"haystack", haystack_label_},      {"haystack_sha256", haystack_sha256_},
                    {"wordlists_sha256", wordlists_sha256_},
                    {"tokens_to_generate", tokens_to_generate_},
                    {"seed", seed},                     {"generator", "reference-style"}};
    cell.label = name() + " length " + std::to_string(length) + " depth " + std::to_string(depth);
    for (int64_t i = 0; i < n; ++i) {
      const SniahSample s = make_sample(Split::test, i, static_cast<uint64_t>(seed), length, depth, *tok);
      harness::Request r;  // RULER: greedy, tokens_to_generate new tokens, EOS only (docs/tasks.md#s-niah)
      r.type = harness::RequestType::generate_until;
      r.arguments = {s.input};
      r.max_gen_toks = tokens_to_generate_;
      r.doc_id = i;
      cell.requests.push_back(std::move(r));
      cell.docs.push_back({{"outputs", {s.value}}, {"depth", s.depth}});
    }
    return cell;
  };
  return plan;
}

json SniahTask::process_results(const json& doc, const std::string& generation, const std::string&) const {
  const auto refs = sniah_references(doc, name() + " sample");
  const std::string pred = ruler_postprocess(generation);
  json record = {{"prediction", pred},
                 {"target", refs.size() == 1 ? json(refs[0]) : json(refs)},
                 {"score", string_match_all(pred, refs)}};
  if (doc.contains("depth")) record["depth"] = doc["depth"];
  return record;
}

// `mnemo score`: RULER's string_match_all against "outputs" (a list of references) or "target".
double SniahTask::score_prediction(const json& row, const std::string& mode, const std::string& where) const {
  sniah_references(row, where);  // errors name the line
  return process_results(row, row_string(row, "prediction", where), mode).at("score").get<double>();
}

std::string SniahTask::score_metric(const std::string&) const { return "string_match_all"; }

void register_sniah_tasks(TaskRegistry& r) {
  for (int v = 1; v <= 3; ++v) {
    TaskFamily f;
    f.name = "sniah_" + std::to_string(v);
    f.description = std::string("S-NIAH-") + std::to_string(v) + " (RULER niah_single_" + std::to_string(v) + "): " +
                    (v == 1 ? "noise haystack, 7-digit number" : v == 2 ? "essay haystack, 7-digit number"
                                                                        : "essay haystack, UUID") +
                    " (docs/tasks.md#s-niah)";
    f.defaults = {{"length", 4096},
                  {"tokens_to_generate", 128},
                  {"depth", -1},
                  {"tokenizer", "byte"},
                  {"haystack", v == 1 ? "noise" : "haystack/PaulGrahamEssays.json"},
                  {"wordlists", "wordlists"},
                  {"with_ids", false}};
    f.help = {{"length", "max_seq_length in tokens: prompt + tokens_to_generate (also the training sequence length)"},
              {"tokens_to_generate", "generation budget reserved in the length (RULER: 128)"},
              {"depth", "needle depth in percent 0..100; -1 = random (RULER: one of 40 depths, noise: any position)"},
              {"tokenizer", "\"byte\", \"byte:plain\" or a SentencePiece .model; the length counts its tokens"},
              {"haystack", "\"noise\" (repeated sentence) or essay text: a JSON file with \"text\", a .txt file "
                           "or a folder of .txt files"},
              {"wordlists", "folder with adjectivelist.txt and nounlist.txt (needle keys)"},
              {"with_ids", "generate: also write the prompt's token ids"}};
    f.trainable = true;
    f.evaluation = "generate_until";
    f.make = [v](const json& params) -> std::shared_ptr<Task> { return std::make_shared<SniahTask>(v, params); };
    r.add(std::move(f));
  }
}

}  // namespace mnemo
