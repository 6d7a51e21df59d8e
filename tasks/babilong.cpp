#include "tasks/babilong.h"

#include <algorithm>
#include <filesystem>

#include "tasks/scoring.h"

namespace mnemo {

namespace {

constexpr int64_t kMinSentenceTokens = 10;  // booydar SentenceSampler min_sentence_len

// Longest prefix of `ids` (at most `keep` tokens) whose decoded text re-encodes to at most `keep`
// tokens (a byte-level cut inside a UTF-8 character would otherwise grow on decoding).
std::vector<int64_t> truncate_tokens(const Tokenizer& tok, const std::vector<int64_t>& ids, int64_t keep) {
  keep = std::min<int64_t>(keep, static_cast<int64_t>(ids.size()));
  while (keep > 0) {
    std::vector<int64_t> cut(ids.begin(), ids.begin() + keep);
    if (static_cast<int64_t>(tok.encode(tok.decode(cut)).size()) <= keep) return cut;
    --keep;
  }
  return {};
}

// Distractor sentences (token lists) totalling exactly `budget` tokens (docs/tasks.md#babilong step 3).
std::vector<std::vector<int64_t>> sample_background(const TextCorpus& corpus, const Tokenizer& tok, int64_t budget,
                                                    int64_t sample_size, SampleRng& rng) {
  std::vector<std::vector<int64_t>> out;
  int64_t total = 0;
  const size_t window = static_cast<size_t>(std::max<int64_t>(sample_size, budget)) * 10;
  for (int attempt = 0; total < budget; ++attempt) {
    if (attempt > 10000)
      throw Error("BABILong: corpus '" + corpus.label() + "' yields no sentences of >= 10 tokens");
    const std::string& doc = corpus.document(rng.below(corpus.size()));
    const size_t start = rng.below(doc.size());
    const auto sentences = split_sentences(doc.substr(start, window));
    if (sentences.size() <= 2) continue;
    for (size_t i = 1; i + 1 < sentences.size(); ++i) {  // first and last are partial
      auto ids = tok.encode(" " + collapse_whitespace(sentences[i]));
      if (static_cast<int64_t>(ids.size()) < kMinSentenceTokens) continue;
      total += static_cast<int64_t>(ids.size());
      if (total >= budget) {
        const int64_t keep = static_cast<int64_t>(ids.size()) - (total - budget);
        ids = truncate_tokens(tok, ids, keep);
        if (!ids.empty()) out.push_back(std::move(ids));
        return out;
      }
      out.push_back(std::move(ids));
    }
  }
  return out;
}

int task_number_checked(int task) {
  if (task < 1 || task > 20) throw Error("BABILong: task must be qa1..qa20, got qa" + std::to_string(task));
  return task;
}

}  // namespace

BabilongSample assemble_babilong_sample(const std::vector<BabiSample>& pool, const TextCorpus* corpus,
                                        const Tokenizer& tok, int64_t sample_size, SampleRng& rng) {
  if (pool.empty()) throw Error("BABILong: empty bAbI sample pool");
  if (sample_size < 0) throw Error("BABILong: negative context budget " + std::to_string(sample_size));
  if (sample_size > 0 && !corpus) throw Error("BABILong: a distractor corpus is needed for a non-zero length");
  const int64_t max_facts = sample_size > 0 ? sample_size / 8 : INT64_MAX;

  // Rejection sampling among the questions whose facts fit.
  for (int attempt = 0; attempt < 2000; ++attempt) {
    const size_t idx = rng.below(pool.size());
    const BabiSample& q = pool[idx];
    if (static_cast<int64_t>(q.facts.size()) > max_facts) continue;
    std::vector<std::vector<int64_t>> fact_ids;
    int64_t fact_tokens = 0;
    for (const auto& f : q.facts) {
      fact_ids.push_back(tok.encode(" " + f));
      fact_tokens += static_cast<int64_t>(fact_ids.back().size());
    }
    if (sample_size > 0 && fact_tokens > sample_size) continue;

    std::vector<std::vector<int64_t>> background;
    if (sample_size > 0) background = sample_background(*corpus, tok, sample_size - fact_tokens, sample_size, rng);

    BabilongSample s;
    s.question = q.question;
    s.target = q.answer;
    s.facts = q.facts;
    s.references = q.references;
    s.sample_size = sample_size;
    s.babi_index = static_cast<int64_t>(idx);
    const uint64_t gaps = background.size() + 1;
    for (size_t k = 0; k < fact_ids.size(); ++k) s.fact_positions.push_back(static_cast<int64_t>(rng.below(gaps)));
    std::sort(s.fact_positions.begin(), s.fact_positions.end());

    std::vector<int64_t> tokens;
    size_t next_fact = 0;
    for (size_t gap = 0; gap < gaps; ++gap) {
      while (next_fact < fact_ids.size() && s.fact_positions[next_fact] == static_cast<int64_t>(gap)) {
        tokens.insert(tokens.end(), fact_ids[next_fact].begin(), fact_ids[next_fact].end());
        ++next_fact;
      }
      if (gap < background.size()) tokens.insert(tokens.end(), background[gap].begin(), background[gap].end());
    }
    s.context = strip(tok.decode(tokens));
    s.context_tokens = static_cast<int64_t>(tok.encode(s.context).size());
    return s;
  }
  throw Error("BABILong: no bAbI question has facts that fit a context of " + std::to_string(sample_size) +
              " tokens (at most " + std::to_string(max_facts) + " facts); use a larger length");
}

std::string babilong_format_prompt(int task, const std::string& format, const BabilongPromptFlags& flags,
                                   const std::string& context, const std::string& question) {
  if (format == "finetune") return context + "\nQuestion: " + question + "\nAnswer:";
  if (format != "prompted")
    throw Error("BABILong: format must be 'finetune' or 'prompted', got '" + format + "'");
  const BabilongPrompt& p = babilong_prompt(task);
  const std::string instruction = flags.instruction ? p.instruction : "";
  const std::string examples = flags.examples ? p.examples : "";
  const std::string post = flags.post_prompt ? p.post_prompt : "";
  return strip(instruction + "\n\n" + examples + "\n\n" + post + "\n\n<context>\n" + strip(context) +
               "\n</context>\n\nQuestion: " + question);
}

double babilong_score(int task, const std::string& mode, const std::string& prediction, const std::string& target,
                      const std::string& question) {
  if (mode == "strict")
    return babilong_compare_answers(target, prediction, question,
                                    babilong_task_labels("qa" + std::to_string(task_number_checked(task))))
               ? 1.0
               : 0.0;
  if (mode == "substring") return substring_match(target, prediction) ? 1.0 : 0.0;
  throw Error("BABILong: mode must be 'strict' or 'substring', got '" + mode + "'");
}

BabilongTask::BabilongTask(int task, const json& p) : task_(task_number_checked(task)), params_(p) {
  try {
    length_ = p.at("length").get<int64_t>();
    prompt_reserve_ = p.at("prompt_reserve").get<int64_t>();
    max_new_tokens_ = p.at("max_new_tokens").get<int64_t>();
    format_ = p.at("format").get<std::string>();
    mode_ = p.at("mode").get<std::string>();
    corpus_spec_ = p.at("corpus").get<std::string>();
    babi_dir_ = p.at("babi_dir").get<std::string>();
    flags_.instruction = p.at("with_instruction").get<bool>();
    flags_.examples = p.at("with_examples").get<bool>();
    flags_.post_prompt = p.at("with_post_prompt").get<bool>();
    with_ids_ = p.at("with_ids").get<bool>();
  } catch (const json::exception& e) {
    throw Error(name() + ": bad parameters " + json_excerpt(p) + ": " + e.what());
  }
  if (length_ < 0) throw Error(name() + ": length must be >= 0, got " + std::to_string(length_));
  if (prompt_reserve_ < 0) throw Error(name() + ": prompt_reserve must be >= 0");
  if (max_new_tokens_ < 1) throw Error(name() + ": max_new_tokens must be >= 1");
  babilong_format_prompt(task_, format_, flags_, "", "");  // validates the format
  babilong_score(task_, mode_, "", "x", "");               // validates the mode
  sample_size_for(length_);                                 // validates length vs prompt_reserve
  tok_ = load_tokenizer(p.at("tokenizer").get<std::string>());
}

int64_t BabilongTask::sample_size_for(int64_t length) const {
  if (length == 0) return 0;
  if (length <= prompt_reserve_)
    throw Error(name() + ": length " + std::to_string(length) + " must exceed prompt_reserve " +
                std::to_string(prompt_reserve_) + " (or be 0 for facts only)");
  return length - prompt_reserve_;
}

std::shared_ptr<const TextCorpus> BabilongTask::corpus() const { return TextCorpus::open(corpus_spec_); }

std::string BabilongTask::haystack_label() const { return corpus()->label(); }

BabilongTask::Item BabilongTask::make_item(Split split, int64_t index, uint64_t seed, int64_t length,
                                           const Tokenizer& tok) const {
  Item item;
  bool fallback = false;
  item.babi_file = babi_task_file(task_, split, babi_dir_, &fallback);
  const auto& pool = load_babi_file(item.babi_file);
  const int64_t sample_size = sample_size_for(length);
  auto corp = sample_size > 0 ? corpus() : nullptr;
  SampleRng rng(sample_seed(seed, index, split == Split::train));
  item.sample = assemble_babilong_sample(pool, corp.get(), tok, sample_size, rng);
  item.prompt = babilong_format_prompt(task_, format_, flags_, item.sample.context, item.sample.question);
  return item;
}

std::vector<json> BabilongTask::generate_rows(Split split, int64_t n, uint64_t seed) const {
  std::vector<json> rows;
  for (int64_t i = 0; i < n; ++i) {
    const Item it = make_item(split, i, seed, length_, *tok_);
    const auto& s = it.sample;
    json row = {{"task", name()},
                {"index", i},
                {"input", it.prompt},
                {"context", s.context},
                {"question", s.question},
                {"target", s.target},
                {"references", s.references},
                {"length", length_},
                {"sample_size", s.sample_size},
                {"context_tokens", s.context_tokens},
                {"input_tokens", prompt_token_count(*tok_, it.prompt)},
                {"fact_positions", s.fact_positions},
                {"haystack", length_ > 0 ? haystack_label() : "none"},
                {"format", format_},
                {"babi_file", std::filesystem::path(it.babi_file).filename().string()},
                {"babi_index", s.babi_index},
                {"tokenizer", tok_->id()},
                {"split", split_name(split)}};
    if (format_ == "prompted") {
      row["with_instruction"] = flags_.instruction;
      row["with_examples"] = flags_.examples;
      row["with_post_prompt"] = flags_.post_prompt;
    }
    if (with_ids_) row["input_ids"] = tok_->encode_with_bos(it.prompt);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<TokenExample> BabilongTask::examples(Split split, int64_t n, uint64_t seed) const {
  if (length_ <= 0) throw Error(name() + ": training examples need length > 0 (the sequence length)");
  std::vector<TokenExample> out;
  out.reserve(n);
  bool fallback = false;
  const std::string file = babi_task_file(task_, split, babi_dir_, &fallback);
  const auto& pool = load_babi_file(file);
  auto corp = corpus();
  for (int64_t i = 0; i < n; ++i) {
    // The context budget follows docs/tasks.md#babilong (length − prompt_reserve); when the prompt scaffolding does
    // not fit in the reserve (e.g. the prompted format), the budget shrinks by the overflow.
    int64_t budget = sample_size_for(length_);
    std::optional<TokenExample> ex;
    BabilongSample s;
    for (int attempt = 0; attempt < 6 && !ex; ++attempt) {
      SampleRng rng(sample_seed(seed, i, split == Split::train));
      s = assemble_babilong_sample(pool, corp.get(), *tok_, budget, rng);
      const std::string prompt = babilong_format_prompt(task_, format_, flags_, s.context, s.question);
      ex = make_answer_example(*tok_, prompt, " " + s.target, length_);
      if (!ex) {
        const int64_t total = prompt_token_count(*tok_, prompt) +
                              static_cast<int64_t>(tok_->encode(" " + s.target).size()) + 1;
        budget -= std::max<int64_t>(1, total - length_ + 1);
        if (budget <= 0) break;
      }
    }
    if (!ex)
      throw Error(name() + ": cannot fit a sample into length " + std::to_string(length_) +
                  " tokens; raise length or use format=finetune");
    ex->meta = {{"task", name()}, {"target", s.target}, {"babi_index", s.babi_index}, {"sample_size", s.sample_size}};
    out.push_back(std::move(*ex));
  }
  return out;
}

json BabilongTask::eval_options_help() const {
  return {{"lengths", "context lengths in tokens, e.g. 0,1000,2000,4096 (default: the task's length)"},
          {"n", "samples per length (default 100, BABILong's test size)"},
          {"seed", "base seed; sample i uses seed + i (default 42)"},
          {"mode", "strict (label sets, compare_answers) | substring (default: the task's mode)"},
          {"max_new_tokens", "generation budget (default: the task's max_new_tokens, 20)"},
          {"prefill_chunk", "prefill the prompt in chunks of this many tokens (0 = whole prompt)"}};
}

GenerationPlan BabilongTask::generation_plan(const EvalContext& ctx) const {
  const auto tok = eval_tokenizer(ctx, params_.at("tokenizer").get<std::string>());
  const auto lengths = option_int_list(ctx.options, "lengths", {length_});
  const int64_t n = option_int(ctx.options, "n", 100);
  const int64_t seed = option_int(ctx.options, "seed", 42);
  const int64_t max_new = option_int(ctx.options, "max_new_tokens", max_new_tokens_);
  const std::string mode = option_string(ctx.options, "mode", mode_);
  babilong_score(task_, mode, "", "x", "");  // validates the mode
  if (n < 1) throw Error(name() + ": eval option n must be >= 1");
  // docs/tasks.md#babilong: the fine-tune format stops at "\n" or EOS, the prompted one at EOS.
  const std::vector<std::string> stops = format_ == "finetune" ? std::vector<std::string>{"\n"}
                                                               : std::vector<std::string>{};
  GenerationPlan plan;
  plan.task = name();
  plan.metric = mode == "strict" ? "accuracy" : "substring_accuracy";
  plan.mode = mode;
  plan.tokenizer = tok;
  plan.prefill_chunk = option_int(ctx.options, "prefill_chunk", 0);
  if (plan.prefill_chunk < 0) throw Error(name() + ": eval option prefill_chunk must be >= 0 (0 = the whole prompt)");
  plan.n_cells = static_cast<int64_t>(lengths.size());
  plan.cell = [this, tok, lengths, n, seed, max_new, mode, stops](int64_t c) {
    const int64_t length = lengths[static_cast<size_t>(c)];
    GenerationCell cell;
    cell.setting = {{"length", length}, {"haystack", length > 0 ? haystack_label() : "none"}, {"format", format_},
                    {"scorer", mode}};
    if (format_ == "prompted") {
      cell.setting["with_instruction"] = flags_.instruction;
      cell.setting["with_examples"] = flags_.examples;
      cell.setting["with_post_prompt"] = flags_.post_prompt;
    }
    cell.details = {{"tokenizer", tok->id()},       {"add_bos", tok->adds_bos()},
                    {"seed", seed},                 {"max_new_tokens", max_new},
                    {"prompt_reserve", prompt_reserve_},
                    {"corpus", length > 0 ? corpus()->fingerprint() : ""},
                    {"babi_dir", babi_dir_},        {"generator", "reference-style"}};
    cell.label = name() + " length " + std::to_string(length);
    for (int64_t i = 0; i < n; ++i) {
      const Item it = make_item(Split::test, i, static_cast<uint64_t>(seed), length, *tok);
      harness::Request r;
      r.type = harness::RequestType::generate_until;
      r.arguments = {it.prompt};
      r.until = stops;
      r.max_gen_toks = max_new;
      r.doc_id = i;
      cell.requests.push_back(std::move(r));
      cell.docs.push_back({{"target", it.sample.target}, {"question", it.sample.question}});
    }
    return cell;
  };
  return plan;
}

json BabilongTask::process_results(const json& doc, const std::string& generation, const std::string& mode) const {
  const std::string where = name() + " sample";
  const std::string target = row_string(doc, "target", where);
  return {{"prediction", generation},
          {"target", target},
          {"score", babilong_score(task_, mode, generation, target, row_string(doc, "question", where))}};
}

// `mnemo score`: BABILong's label-set scorer (strict) or substring match on "target" and "question".
double BabilongTask::score_prediction(const json& row, const std::string& mode, const std::string& where) const {
  if (mode != "strict" && mode != "substring")
    throw Error("score: --mode must be strict or substring, got '" + mode + "'");
  const std::string prediction = row_string(row, "prediction", where);
  row_string(row, "target", where);  // errors name the line
  row_string(row, "question", where);
  return process_results(row, prediction, mode).at("score").get<double>();
}

std::string BabilongTask::score_metric(const std::string& mode) const {
  return mode == "strict" ? "accuracy" : "substring_accuracy";
}

void register_babilong_tasks(TaskRegistry& r) {
  const json defaults = {{"length", 1000},
                         {"prompt_reserve", 300},
                         {"tokenizer", "byte"},
                         {"corpus", "corpus/gutenberg"},
                         {"babi_dir", "babi/en-10k"},
                         {"format", "finetune"},
                         {"with_instruction", true},
                         {"with_examples", true},
                         {"with_post_prompt", true},
                         {"mode", "strict"},
                         {"max_new_tokens", 20},
                         {"with_ids", false}};
  const json help = {
      {"length", "BABILong length in tokens (0 = facts only); the context budget is length - prompt_reserve; "
                 "also the training sequence length"},
      {"prompt_reserve", "tokens kept for the prompt around the context (BABILong: 300)"},
      {"tokenizer", "\"byte\", \"byte:plain\" or a SentencePiece .model; lengths count its tokens"},
      {"corpus", "distractor text: folder of .txt files, a .txt file, or a JSON file with \"text\" "
                 "(default: 111 pre-1919 Project Gutenberg books, PG-19-like; results are labelled with it)"},
      {"babi_dir", "bAbI v1.2 folder (test split: evaluation; train split: fine-tuning)"},
      {"format", "finetune (\"{context}\\nQuestion: {q}\\nAnswer:\") | prompted (booydar/babilong prompts)"},
      {"with_instruction", "prompted format: include the task instruction"},
      {"with_examples", "prompted format: include the in-context examples"},
      {"with_post_prompt", "prompted format: include the post-prompt"},
      {"mode", "scorer: strict (label sets, compare_answers) | substring"},
      {"max_new_tokens", "greedy generation budget at evaluation"},
      {"with_ids", "generate: also write the prompt's token ids"}};
  for (int t = 1; t <= 20; ++t) {
    TaskFamily f;
    f.name = "babilong_qa" + std::to_string(t);
    f.description = "BABILong qa" + std::to_string(t) +
                    ": bAbI facts hidden in distractor text, answer by generation (docs/tasks.md#babilong)";
    f.defaults = defaults;
    f.help = help;
    f.trainable = true;
    f.evaluation = "generate_until";
    f.make = [t](const json& params) -> std::shared_ptr<Task> { return std::make_shared<BabilongTask>(t, params); };
    r.add(std::move(f));
  }
}

}  // namespace mnemo
