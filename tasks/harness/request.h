// lm-evaluation-harness requests and their encoding (docs/tasks.md#evaluation-machinery, docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext; external:
// EleutherAI/lm-evaluation-harness lm_eval/api/instance.py, lm_eval/models/huggingface.py `_encode_pair`,
// lm_eval/utils.py `get_rolling_token_windows`, `make_disjoint_window`). Tasks build requests from strings;
// the engine's driver encodes them with these functions and asks the model (tasks/model_api.h).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/common.h"
#include "tasks/tokenizer.h"

namespace mnemo::harness {

// lm-eval's three request types, and two of mnemo's on token ids the task made in the model's vocabulary (no
// tokenizer involved): token_predictions scores a sequence against per-position labels (the token tasks MQAR, MAD:
// the model's logits at once); token_logprobs asks for the log-probability of every token of a sequence given the
// tokens before it (lm_ppl's windows of a validation stream, fed through the model's state prefill_chunk tokens at a
// time).
enum class RequestType { loglikelihood, loglikelihood_rolling, generate_until, token_predictions, token_logprobs };
// "loglikelihood", "loglikelihood_rolling", "generate_until", "token_predictions", "token_logprobs"
std::string request_type_name(RequestType t);

// One request of one document, as lm-eval's Instance: `arguments` exactly as passed to the model before
// encoding — loglikelihood {context, continuation}; rolling {text}; generate_until {context}; token_predictions
// has no strings, its input_ids and labels instead; token_logprobs its input_ids (at least two) alone.
struct Request {
  RequestType type = RequestType::loglikelihood;
  std::vector<std::string> arguments;
  std::vector<std::string> until;  // generate_until only
  int64_t max_gen_toks = 256;      // generate_until only
  std::vector<int64_t> input_ids;  // token_predictions, token_logprobs: the model's input
  std::vector<int64_t> labels;     // token_predictions only: the target per position, -100 = not scored
  int64_t prefill_chunk = 0;       // token_logprobs only: tokens per forward through the model's state (0 = all)
  int64_t doc_id = 0;              // the document's 0-based index in the task's data (WikiText: the page index)
  int64_t idx = 0;                 // index of the request within its document's requests
};

// The model's answer: loglikelihood -> (ll, is_greedy); rolling -> ll (sum over the document's tokens);
// generate_until -> text; token_predictions -> the argmax at every position and the cross-entropy summed over the
// labelled positions (n_labels of them); token_logprobs -> log p(ids[t] | ids[:t]) for t = 1 .. n - 1 (n - 1 values).
struct Response {
  double ll = 0;
  bool is_greedy = false;
  std::string text;
  std::vector<int64_t> predictions;
  double loss_sum = 0;
  int64_t n_labels = 0;
  std::vector<double> logprobs;
};

// lm-eval `_encode_pair`: trailing whitespace of the context moves to the continuation; the whole string is
// encoded once and the continuation tokens are those after len(encode(context)). With add_bos, BOS (the
// tokenizer's; EOS if it has none) is the first context token. An empty context becomes {prefix token}.
// Returns (context_ids, continuation_ids); no truncation here (the driver left-truncates to max_length).
std::pair<std::vector<int64_t>, std::vector<int64_t>> encode_pair(const Tokenizer& tok, const std::string& context,
                                                                  const std::string& continuation, bool add_bos);

// The prefix token of rolling windows and empty contexts: BOS, else EOS (Error when the tokenizer has neither).
int64_t prefix_token(const Tokenizer& tok);

// lm-eval get_rolling_token_windows(token_list, prefix_token, max_seq_len, context_len=1) followed by
// make_disjoint_window on each: (context, continuation) token windows whose continuations tile `tokens`.
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> rolling_windows(const std::vector<int64_t>& tokens,
                                                                                   int64_t prefix_token,
                                                                                   int64_t max_seq_len,
                                                                                   int64_t context_len = 1);

}  // namespace mnemo::harness
