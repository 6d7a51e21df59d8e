#include "tasks/lm_ppl_evaluation.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace mnemo {

using harness::Request;
using harness::RequestType;
using harness::Response;

LmPplEvaluation::LmPplEvaluation(const LmPplTask& task, const EvalContext& ctx, std::shared_ptr<const Task> owner)
    : owner_(std::move(owner)), task_(task) {
  const int64_t T = task.seq_len();
  const std::vector<int64_t> lengths = option_int_list(ctx.options, "lengths", {T});
  std::set<int64_t> seen;
  for (int64_t L : lengths) {
    if (L < 2) throw Error("lm_ppl: every length must be >= 2, got " + std::to_string(L));
    if (!seen.insert(L).second) throw Error("lm_ppl: lengths lists " + std::to_string(L) + " twice");
  }
  longest_ = *std::max_element(lengths.begin(), lengths.end());
  max_tokens_ = option_int(ctx.options, "max_tokens", std::max<int64_t>(65536, 4 * longest_));
  bucket_ = option_int(ctx.options, "bucket", std::min<int64_t>(2048, std::max<int64_t>(1, longest_ / 8)));
  chunk_ = option_int(ctx.options, "chunk", T);
  // batch_size (windows per forward) is the driver's; checked here with the other options, before any work.
  if (max_tokens_ < 2 || bucket_ < 1 || chunk_ < 0 || option_int(ctx.options, "batch_size", 1) < 1)
    throw Error("lm_ppl: max_tokens >= 2, bucket >= 1, chunk >= 0 and batch_size >= 1 are required");

  data_ = task.prepare(ctx.log, false, ctx.tokenizer);
  if (data_.tokenizer->vocab_size() != ctx.model.vocab_size())
    throw Error("lm_ppl: tokenizer " + data_.tokenizer->id() + " has " + std::to_string(data_.tokenizer->vocab_size()) +
                " tokens but the checkpoint's vocab_size is " + std::to_string(ctx.model.vocab_size()) +
                " (evaluate with the tokenizer the model was trained with)");
  const int64_t stream = data_.validation->size();
  if (stream < longest_)
    throw Error("lm_ppl: the validation stream " + data_.validation_label + " has " + std::to_string(stream) +
                " tokens, fewer than the longest length " + std::to_string(longest_));
  // Per length, the first max(max_tokens, L) tokens of the stream in windows of L; a last partial window of >= 2
  // tokens is scored on its own.
  for (int64_t L : lengths) {
    const int64_t n = std::min(stream, std::max(max_tokens_, L)), full = n / L, rest = n - full * L;
    for (int64_t k = 0; k < full; ++k) windows_.push_back({L, k * L, L});
    if (rest >= 2) windows_.push_back({L, full * L, rest});
  }
}

std::vector<harness::MetricSpec> LmPplEvaluation::metrics() const {
  return {{"ppl", "weighted_perplexity", false}, {"bpb", "bits_per_byte", false}};
}

const LmPplEvaluation::Window& LmPplEvaluation::window(int64_t doc_id) const {
  if (doc_id < 0 || doc_id >= num_docs())
    throw Error("task lm_ppl: document " + std::to_string(doc_id) + " is outside its " + std::to_string(num_docs()) +
                " windows");
  return windows_[static_cast<size_t>(doc_id)];
}

std::vector<int64_t> LmPplEvaluation::window_ids(const Window& w) const {
  std::vector<int64_t> ids(static_cast<size_t>(w.tokens));
  data_.validation->read(w.start, w.tokens, ids.data());
  return ids;
}

json LmPplEvaluation::doc(int64_t doc_id) const {
  const Window& w = window(doc_id);
  return {{"length", w.length}, {"start", w.start}, {"tokens", w.tokens}};
}

std::vector<Request> LmPplEvaluation::requests(int64_t doc_id) const {
  Request r;
  r.type = RequestType::token_logprobs;
  r.input_ids = window_ids(window(doc_id));
  r.prefill_chunk = chunk_;
  r.doc_id = doc_id;
  return {r};
}

json LmPplEvaluation::process_results(const json& doc, const std::vector<Response>& responses) const {
  const Window w{doc.at("length").get<int64_t>(), doc.at("start").get<int64_t>(), doc.at("tokens").get<int64_t>()};
  if (responses.size() != 1 || static_cast<int64_t>(responses[0].logprobs.size()) != w.tokens - 1)
    throw Error("task lm_ppl: the window at " + std::to_string(w.start) + " expects one response of " +
                std::to_string(w.tokens - 1) + " log-probabilities");
  const std::vector<int64_t> ids = window_ids(w);
  const std::vector<double>& lp = responses[0].logprobs;
  const bool by_bucket = w.length == longest_;
  double ll = 0, bytes = 0;
  json buckets = json::array();
  std::vector<std::pair<double, int64_t>> bucket_sums;
  for (int64_t p = 1; p < w.tokens; ++p) {  // the token at window position p, predicted from positions < p
    const double x = lp[static_cast<size_t>(p - 1)];
    const int64_t id = ids[static_cast<size_t>(p)];
    ll += x;
    bytes += id >= 0 && id < static_cast<int64_t>(data_.byte_lengths.size()) ? data_.byte_lengths[id] : 0;
    if (by_bucket) {
      const auto k = static_cast<size_t>(p / bucket_);
      if (bucket_sums.size() <= k) bucket_sums.resize(k + 1, {0.0, 0});
      bucket_sums[k].first += x;
      bucket_sums[k].second += 1;
    }
  }
  json out = {{"ppl", {ll, w.tokens - 1}}, {"bpb", {ll, bytes}}};
  if (by_bucket) {
    for (const auto& [s, n] : bucket_sums) buckets.push_back({s, n});
    out["buckets"] = buckets;
  }
  return out;
}

json LmPplEvaluation::doc_setting(const json& doc) const {
  return {{"length", doc.at("length")}, {"corpus", data_.validation_label}, {"train_seq_len", task_.seq_len()}};
}

json LmPplEvaluation::cell_details(const json&) const {
  return {{"tokenizer", data_.tokenizer->id()}, {"max_tokens", max_tokens_}, {"chunk", chunk_},
          {"validation", data_.validation_label}};
}

std::string LmPplEvaluation::cell_label(const json& setting) const {
  return "lm_ppl: length " + setting.at("length").dump();
}

harness::CellSummary LmPplEvaluation::cell_summary(const json& setting, const std::vector<json>& results) const {
  harness::CellSummary out;
  int64_t tokens = 0;
  for (const json& r : results) tokens += r.at("ppl").at(1).get<int64_t>();
  out.details["tokens"] = tokens;
  const int64_t L = setting.at("length").get<int64_t>();
  if (L != longest_) return out;
  // Per position bucket [k * bucket, (k + 1) * bucket) of the predicted token in its window: Σ log p and the tokens
  // over every window of the cell, in window order.
  std::vector<std::pair<double, int64_t>> sums;
  for (const json& r : results) {
    const json& b = r.at("buckets");
    if (sums.size() < b.size()) sums.resize(b.size(), {0.0, 0});
    for (size_t k = 0; k < b.size(); ++k) {
      sums[k].first += b[k].at(0).get<double>();
      sums[k].second += b[k].at(1).get<int64_t>();
    }
  }
  for (size_t k = 0; k < sums.size(); ++k) {
    const int64_t b0 = static_cast<int64_t>(k) * bucket_, b1 = std::min<int64_t>(L, b0 + bucket_);
    harness::CellRow row;
    row.metric = "ppl_bucket";
    row.setting = setting;
    row.setting["bucket_start"] = b0;
    row.setting["bucket_end"] = b1;
    row.value = sums[k].second > 0 ? std::exp(-sums[k].first / static_cast<double>(sums[k].second)) : NAN;
    row.n = static_cast<int64_t>(results.size());
    row.details = cell_details(setting);
    row.details["tokens"] = sums[k].second;
    out.rows.push_back(std::move(row));
  }
  return out;
}

// ---- the task's evaluation ----

std::unique_ptr<harness::HarnessTask> LmPplTask::evaluation(const EvalContext& ctx, std::shared_ptr<const Task> self) const {
  return std::make_unique<LmPplEvaluation>(*this, ctx, std::move(self));
}

}  // namespace mnemo
