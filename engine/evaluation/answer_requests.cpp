// How the evaluation driver answers a task's requests, by type (engine/evaluation/answer_requests.h).
#include "engine/evaluation/answer_requests.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/signals.h"
#include "engine/evaluation/generate_until.h"
#include "engine/evaluation/harness_output.h"
#include "engine/evaluation/model_adapter.h"
#include "engine/evaluation/token_eval.h"

namespace mnemo {

using harness::Request;
using harness::RequestType;
using harness::Response;
using Log = std::function<void(const std::string&)>;

namespace {

// Progress lines of one task's requests: done / total, requests/s, ETA; at most one every 2 s unless forced.
struct Progress {
  std::string task;
  int64_t total = 0;
  double t0 = wall_seconds(), last = 0;
  Log log;
  void update(int64_t done, bool force = false) {
    const double now = wall_seconds();
    if (!log || (!force && now - last < 2.0)) return;
    last = now;
    const double rate = done / std::max(1e-9, now - t0);
    const double eta = rate > 0 ? (total - done) / rate : 0;
    log("[" + task + "] " + std::to_string(done) + "/" + std::to_string(total) + " requests (" +
        format_fixed(100.0 * done / std::max<int64_t>(1, total), 0) + "%), " + format_fixed(rate, 1) + " requests/s, ETA " +
        format_fixed(eta, 0) + " s");
  }
};

}  // namespace

std::vector<std::vector<Response>> answer_requests(EvalModel& model, const Tokenizer* tok_or_null, const AnswerJob& w,
                                                   bool add_bos, const AnswerOptions& o, const Log& log,
                                                   int64_t& max_length, std::vector<double>& done_at) {
  done_at.assign(w.reqs.size(), 0.0);
  std::vector<std::vector<Response>> resp(w.reqs.size());
  std::vector<TokenPair> treq;
  std::vector<std::pair<size_t, size_t>> owner;  // token request -> (doc, request)
  std::vector<std::pair<size_t, size_t>> gens;
  std::vector<std::pair<size_t, size_t>> predictions;  // token_predictions requests, in document order
  std::vector<std::pair<size_t, size_t>> logprobs;     // token_logprobs requests, in document order
  auto tokenizer = [&]() -> const Tokenizer& {
    if (!tok_or_null) throw Error("task " + w.name + " asks for text requests, but the evaluation has no tokenizer");
    return *tok_or_null;
  };
  std::optional<int64_t> prefix;  // only rolling requests need one (an Error for a tokenizer with neither BOS nor EOS)
  for (size_t d = 0; d < w.reqs.size(); ++d) {
    resp[d].resize(w.reqs[d].size());
    for (size_t i = 0; i < w.reqs[d].size(); ++i) {
      const Request& r = w.reqs[d][i];
      if (r.type == RequestType::token_predictions) {
        predictions.emplace_back(d, i);
      } else if (r.type == RequestType::token_logprobs) {
        logprobs.emplace_back(d, i);
      } else if (r.type == RequestType::loglikelihood) {
        treq.push_back(harness::encode_pair(tokenizer(), r.arguments[0], r.arguments[1], add_bos));
        owner.emplace_back(d, i);
        resp[d][i].is_greedy = true;
      } else if (r.type == RequestType::loglikelihood_rolling) {
        // docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext: the page's tokens without special tokens; windows with one token of context.
        if (!prefix) prefix = harness::prefix_token(tokenizer());
        for (auto& win : harness::rolling_windows(tokenizer().encode(r.arguments[0]), *prefix, o.max_length, 1)) {
          treq.push_back(std::move(win));
          owner.emplace_back(d, i);
        }
      } else {
        gens.emplace_back(d, i);
      }
    }
  }
  // A continuation longer than max_length cannot be scored (lm-eval asserts it fits). With a default max_length
  // the task is scored at its longest request instead; a --max-length given is kept, and the error says which.
  max_length = o.max_length;
  size_t longest_cont = 0, longest_total = 0, longest_at = 0;
  for (size_t k = 0; k < treq.size(); ++k) {
    longest_total = std::max(longest_total, treq[k].first.size() + treq[k].second.size());
    if (treq[k].second.size() > longest_cont) {
      longest_cont = treq[k].second.size();
      longest_at = k;
    }
  }
  if (static_cast<int64_t>(longest_cont) > max_length) {
    const std::string where = "task " + w.name + ", document " + std::to_string(owner[longest_at].first);
    if (o.max_length_given)
      throw Error(where + ": the continuation has " + std::to_string(longest_cont) + " tokens, more than --max-length " +
                  std::to_string(max_length) + "; give --max-length " + std::to_string(longest_total) +
                  " (this task's longest request) or more");
    max_length = static_cast<int64_t>(longest_total);
    if (log)
      log("[" + w.name + "] max_length " + std::to_string(max_length) + " (its longest request; the default " +
          std::to_string(o.max_length) + " is shorter than a continuation of " + std::to_string(longest_cont) +
          " tokens; --max-length sets it)");
  }
  const size_t token_requests = predictions.size() + logprobs.size();
  Progress p{w.name, static_cast<int64_t>(treq.size() + gens.size() + token_requests)};
  p.log = log;
  // The requests on token ids (token_predictions, then token_logprobs), in document order.
  auto answer_token_kind = [&](const std::vector<std::pair<size_t, size_t>>& which, const std::string& kind,
                               int64_t batch, size_t done_before, const auto& answer) {
    if (which.empty()) return;
    if (log)
      log("[" + w.name + "] " + w.documents + ", " + std::to_string(which.size()) + " " + kind + " requests, batch " +
          std::to_string(batch));
    std::vector<const Request*> batch_requests;
    for (const auto& [d, i] : which) batch_requests.push_back(&w.reqs[d][i]);
    std::vector<Response> ans;
    size_t stamped = 0;
    try {
      ans = answer(model, batch_requests, batch, [&](int64_t done) {
        if (stop_requested()) throw Error(std::string("interrupted by ") + stop_signal_name() + " in task " + w.name);
        const int64_t all_done = static_cast<int64_t>(done_before) + done;
        p.update(all_done, all_done == static_cast<int64_t>(token_requests) && treq.empty() && gens.empty());
        // The documents whose requests this batch answered (requests come in document order).
        const double now = wall_seconds();
        for (; stamped < static_cast<size_t>(done); ++stamped) done_at[which[stamped].first] = now;
      });
    } catch (const Error& e) {
      throw Error("task " + w.name + ", " + e.what());
    }
    for (size_t k = 0; k < which.size(); ++k) resp[which[k].first][which[k].second] = std::move(ans[k]);
  };
  answer_token_kind(predictions, "token_predictions", o.token_batch_size, 0, answer_token_requests);
  answer_token_kind(logprobs, "token_logprobs", o.batch_size, predictions.size(), answer_logprob_requests);
  if (treq.empty() && gens.empty()) return resp;
  if (log)
    log("[" + w.name + "] " + w.documents + ", " + std::to_string(w.n_requests) + " requests (" +
        std::to_string(treq.size()) + " scored sequences, " + std::to_string(gens.size()) + " generations), batch " +
        std::to_string(o.batch_size) + ", max_length " + std::to_string(max_length));
  const auto order = loglikelihood_order(treq);
  const size_t per_slice = static_cast<size_t>(o.batch_size) * static_cast<size_t>((64 + o.batch_size - 1) / o.batch_size);
  for (size_t s = 0; s < order.size(); s += per_slice) {
    const size_t e = std::min(order.size(), s + per_slice);
    std::vector<TokenPair> slice;
    slice.reserve(e - s);
    for (size_t k = s; k < e; ++k) slice.push_back(treq[order[k]]);
    if (stop_requested()) throw Error(std::string("interrupted by ") + stop_signal_name() + " in task " + w.name);
    const auto ans = model.loglikelihood_tokens(slice, o.batch_size, max_length);
    if (ans.size() != slice.size()) throw Error("loglikelihood_tokens returned a wrong number of answers");
    for (size_t k = s; k < e; ++k) {
      const double ll = ans[k - s].first;
      if (!std::isfinite(ll))  // a NaN scores like any number in the argmax of a multiple choice: never scored
        throw Error("task " + w.name + ", document " + std::to_string(owner[order[k]].first) +
                    ": the model's log-likelihood is " + format_fixed(ll, 1) +
                    " (non-finite weights or activations); nothing scored, no results written");
      Response& r = resp[owner[order[k]].first][owner[order[k]].second];
      r.ll += ll;  // rolling: the document's ll is the sum over its windows
      r.is_greedy = r.is_greedy && ans[k - s].second;
    }
    p.update(static_cast<int64_t>(token_requests + e), e == order.size() && gens.empty());
  }
  for (const auto& [d, i] : owner) done_at[d] = wall_seconds();
  std::vector<Request> gen_requests;
  for (const auto& [d, i] : gens) gen_requests.push_back(w.reqs[d][i]);
  const harness::GenerationPolicy policy = w.task.generation_policy();
  GenerateUntilOptions g;
  g.add_bos = add_bos;
  if (policy.truncate) g.max_length = max_length;  // else none: the task sized its prompts
  g.prefill_chunk = policy.prefill_chunk;
  g.progress = [&](int64_t done) {
    if (done > 0) done_at[gens[static_cast<size_t>(done - 1)].first] = wall_seconds();
    p.update(static_cast<int64_t>(token_requests + order.size()) + done, done == static_cast<int64_t>(gens.size()));
  };
  std::vector<std::string> texts;
  if (gens.empty()) return resp;
  try {
    texts = generate_until(model, tokenizer(), gen_requests, g);
  } catch (const Error& e) {
    throw Error("task " + w.name + ", " + e.what());
  }
  for (size_t k = 0; k < gens.size(); ++k) resp[gens[k].first][gens[k].second].text = texts[k];
  return resp;
}

}  // namespace mnemo
