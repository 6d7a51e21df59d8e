#include "tasks/eval_task.h"

#include "tasks/scoring.h"

namespace mnemo {

std::vector<int64_t> option_int_list(const json& options, const std::string& key,
                                     const std::vector<int64_t>& fallback) {
  if (!options.is_object() || !options.contains(key) || options[key].is_null()) return fallback;
  const json& v = options[key];
  std::vector<int64_t> out;
  auto bad = [&]() {
    return Error("eval option '" + key + "': expected an integer, a list of integers or \"a,b,c\", got " + json_excerpt(v));
  };
  if (v.is_number_integer()) {
    out.push_back(v.get<int64_t>());
  } else if (v.is_array()) {
    for (const auto& x : v) {
      if (!x.is_number_integer()) throw bad();
      out.push_back(x.get<int64_t>());
    }
  } else if (v.is_string()) {
    const std::string s = v.get<std::string>();
    size_t start = 0;
    while (start <= s.size()) {
      auto p = s.find(',', start);
      if (p == std::string::npos) p = s.size();
      const std::string item = strip(s.substr(start, p - start));
      if (!item.empty()) {
        size_t used = 0;
        int64_t x = 0;
        try {
          x = std::stoll(item, &used);
        } catch (const std::exception&) {
          throw bad();
        }
        if (used != item.size()) throw bad();
        out.push_back(x);
      }
      start = p + 1;
    }
  } else {
    throw bad();
  }
  if (out.empty()) throw bad();
  return out;
}

int64_t option_int(const json& options, const std::string& key, int64_t fallback) {
  if (!options.is_object() || !options.contains(key) || options[key].is_null()) return fallback;
  const json& v = options[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    const auto list = option_int_list(options, key, {});
    if (list.size() == 1) return list[0];
  }
  throw Error("eval option '" + key + "': expected an integer, got " + json_excerpt(v));
}

std::string option_string(const json& options, const std::string& key, const std::string& fallback) {
  if (!options.is_object() || !options.contains(key) || options[key].is_null()) return fallback;
  if (!options[key].is_string()) throw Error("eval option '" + key + "': expected a string, got " + json_excerpt(options[key]));
  return options[key].get<std::string>();
}

std::optional<TokenExample> make_answer_example(const Tokenizer& tok, const std::string& prompt,
                                                const std::string& answer, int64_t seq_len) {
  if (seq_len < 2) throw Error("make_answer_example: seq_len must be >= 2, got " + std::to_string(seq_len));
  // docs/tasks.md#evaluation-machinery step 1: trailing whitespace of the context moves to the front of the continuation.
  size_t cut = prompt.size();
  while (cut > 0 && (prompt[cut - 1] == ' ' || prompt[cut - 1] == '\t' || prompt[cut - 1] == '\n')) --cut;
  const std::string context = prompt.substr(0, cut);
  const std::string continuation = prompt.substr(cut) + answer;

  std::vector<int64_t> seq = tok.encode_with_bos(context + continuation);
  const size_t context_len = tok.encode_with_bos(context).size();
  if (tok.eos_id() >= 0) seq.push_back(tok.eos_id());
  if (static_cast<int64_t>(seq.size()) > seq_len + 1) return std::nullopt;
  if (seq.size() <= context_len) throw Error("make_answer_example: the answer '" + answer + "' encodes to no tokens");

  TokenExample ex;
  ex.input_ids.assign(seq.begin(), seq.end() - 1);
  ex.labels.assign(ex.input_ids.size(), kIgnoreLabel);
  for (size_t i = 0; i + 1 < seq.size(); ++i)
    if (i + 1 >= context_len) ex.labels[i] = seq[i + 1];
  ex.input_ids.resize(seq_len, tok.pad_id());
  ex.labels.resize(seq_len, kIgnoreLabel);
  return ex;
}

int64_t prompt_token_count(const Tokenizer& tok, const std::string& prompt) {
  return static_cast<int64_t>(tok.encode(prompt).size()) + (tok.adds_bos() ? 1 : 0);
}

std::shared_ptr<Tokenizer> eval_tokenizer(const EvalContext& ctx, const std::string& spec) {
  auto tok = ctx.tokenizer ? ctx.tokenizer : load_tokenizer(spec);
  const int64_t model_vocab = ctx.model.vocab_size();
  if (tok->vocab_size() > model_vocab)
    throw Error("tokenizer " + tok->id() + " has " + std::to_string(tok->vocab_size()) +
                " tokens but the model's vocab_size is " + std::to_string(model_vocab) +
                " (evaluate with the tokenizer the model was trained with)");
  return tok;
}

std::string row_string(const json& row, const std::string& key, const std::string& where) {
  if (!row.contains(key)) throw Error(where + ": missing field \"" + key + "\"");
  if (!row[key].is_string()) throw Error(where + ": field \"" + key + "\" must be a string, got " + json_excerpt(row[key]));
  return row[key].get<std::string>();
}

void record_cells(EvalContext& ctx, const std::vector<EvalCell>& cells) {
  if (ctx.record && !cells.empty()) ctx.record(cells);
}

}  // namespace mnemo
