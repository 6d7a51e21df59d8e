// lm-eval request encoding (docs/tasks.md#evaluation-machinery, docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext): lm_eval/api/model.py TemplateLM._encode_pair and
// TemplateLM.loglikelihood (empty context), lm_eval/models/huggingface.py prefix_token_id, lm_eval/utils.py
// get_rolling_token_windows and make_disjoint_window.
#include "tasks/harness/request.h"

#include <algorithm>

#include "tasks/harness/py_compat.h"

namespace mnemo::harness {

std::string request_type_name(RequestType t) {
  switch (t) {
    case RequestType::loglikelihood: return "loglikelihood";
    case RequestType::loglikelihood_rolling: return "loglikelihood_rolling";
    case RequestType::generate_until: return "generate_until";
    case RequestType::token_predictions: return "token_predictions";
    case RequestType::token_logprobs: return "token_logprobs";
  }
  throw Error("unknown request type " + std::to_string(static_cast<int>(t)));
}

int64_t prefix_token(const Tokenizer& tok) {
  if (tok.bos_id() >= 0) return tok.bos_id();
  if (tok.eos_id() >= 0) return tok.eos_id();
  throw Error("tokenizer " + tok.id() + " has neither BOS nor EOS: no prefix token for empty contexts and rolling "
              "windows (use a tokenizer with specials, e.g. \"byte\")");
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> encode_pair(const Tokenizer& tok, const std::string& context,
                                                                  const std::string& continuation, bool add_bos) {
  if (context.empty()) {
    // TemplateLM.loglikelihood: the continuation alone (no specials); the prefix token is the context unless the
    // continuation already starts with it, in which case that first token becomes the context.
    std::vector<int64_t> cont = tok.encode(continuation);
    const int64_t prefix = prefix_token(tok);
    if (!cont.empty() && cont.front() == prefix) return {{cont.front()}, std::vector<int64_t>(cont.begin() + 1, cont.end())};
    return {{prefix}, cont};
  }
  // _encode_pair: trailing whitespace (str.rstrip's notion of it) moves to the front of the continuation.
  const std::string ctx = py::rstrip(context);
  const std::string cont = context.substr(ctx.size()) + continuation;
  // Causal models: encode the whole string once; the continuation is what follows len(encode(context)).
  const std::vector<int64_t> whole = tok.encode(ctx + cont);
  std::vector<int64_t> ctx_ids = tok.encode(ctx);
  std::vector<int64_t> cont_ids(whole.begin() + std::min(ctx_ids.size(), whole.size()), whole.end());
  // With add_special_tokens both encodings start with BOS (lm-eval's tok_encode), which leaves the split as is.
  if (add_bos) ctx_ids.insert(ctx_ids.begin(), prefix_token(tok));
  // [decision] an all-whitespace context leaves no context token at all (lm-eval scores garbage there): the
  // prefix token stands in, as for an empty context.
  if (ctx_ids.empty()) ctx_ids.push_back(prefix_token(tok));
  return {ctx_ids, cont_ids};
}

namespace {
// Python list slicing a[start:stop] (negative indices count from the end, bounds clamped).
std::vector<int64_t> slice(const std::vector<int64_t>& a, int64_t start, int64_t stop) {
  const auto n = static_cast<int64_t>(a.size());
  auto norm = [n](int64_t i) { return std::clamp(i < 0 ? i + n : i, int64_t{0}, n); };
  start = norm(start);
  stop = norm(stop);
  if (stop <= start) return {};
  return std::vector<int64_t>(a.begin() + start, a.begin() + stop);
}
}  // namespace

std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> rolling_windows(const std::vector<int64_t>& tokens,
                                                                                   int64_t prefix_token,
                                                                                   int64_t max_seq_len,
                                                                                   int64_t context_len) {
  if (context_len < 1 || context_len > max_seq_len)
    throw Error("rolling windows: need 1 <= context_len <= max_seq_len, got context_len " +
                std::to_string(context_len) + ", max_seq_len " + std::to_string(max_seq_len));
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> out;
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) return out;
  // make_disjoint_window: a[: len(a) - (len(b) - 1)] — the context keeps only what precedes the first prediction.
  auto disjoint = [](std::vector<int64_t> a, std::vector<int64_t> b) {
    a = slice(a, 0, static_cast<int64_t>(a.size()) - (static_cast<int64_t>(b.size()) - 1));
    return std::make_pair(std::move(a), std::move(b));
  };
  const int64_t pred_len = max_seq_len - context_len + 1;
  // First window predicts all of its tokens from [prefix] + tokens[: first - 1].
  const int64_t first = std::min(max_seq_len, n);
  std::vector<int64_t> input{prefix_token};
  const auto head = slice(tokens, 0, first - 1);
  input.insert(input.end(), head.begin(), head.end());
  out.push_back(disjoint(std::move(input), slice(tokens, 0, first)));
  int64_t predicted = first;
  while (predicted < n) {
    const int64_t window_pred_len = std::min(n - predicted, pred_len);
    const int64_t window_end = predicted + window_pred_len;
    out.push_back(disjoint(slice(tokens, window_end - max_seq_len - 1, window_end - 1),
                           slice(tokens, window_end - window_pred_len, window_end)));
    predicted += window_pred_len;
  }
  return out;
}

}  // namespace mnemo::harness
