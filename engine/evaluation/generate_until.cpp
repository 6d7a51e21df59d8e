// lm-eval HFLM.generate_until (lm_eval/models/huggingface.py) for mnemo's EvalModel (engine/evaluation/generate_until.h).
#include "engine/evaluation/generate_until.h"

#include "core/common.h"
#include "core/signals.h"

namespace mnemo {

namespace {

std::string answer_one(EvalModel& model, const Tokenizer& tok, const harness::Request& r,
                       const GenerateUntilOptions& o) {
  std::vector<int64_t> ids = tok.encode(r.arguments[0]);
  if (o.add_bos && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  if (o.max_length) {
    const int64_t max_ctx = *o.max_length - r.max_gen_toks;  // lm-eval: max_length - max_gen_toks
    if (max_ctx < 1)
      throw Error("generate_until: max_gen_toks " + std::to_string(r.max_gen_toks) + " leaves no context within "
                  "max_length " + std::to_string(*o.max_length));
    if (static_cast<int64_t>(ids.size()) > max_ctx) ids.erase(ids.begin(), ids.end() - max_ctx);
  }
  if (ids.empty()) ids.push_back(harness::prefix_token(tok));
  std::vector<std::string> until;
  for (const auto& u : r.until)
    if (!u.empty()) until.push_back(u);
  GenerationRequest g;
  g.max_new_tokens = r.max_gen_toks;
  g.prefill_chunk = o.prefill_chunk;
  if (tok.eos_id() >= 0) g.stop_ids = {tok.eos_id()};
  if (!until.empty()) {
    g.should_stop = [&](const std::vector<int64_t>& out) {
      const std::string text = tok.decode(out);
      for (const auto& u : until)
        if (text.find(u) != std::string::npos) return true;
      return false;
    };
  }
  std::string text = tok.decode(model.generate_greedy(ids, g));
  for (const auto& u : until) text = text.substr(0, text.find(u));  // Python: text.split(term)[0], each in turn
  return text;
}

}  // namespace

std::vector<std::string> generate_until(EvalModel& model, const Tokenizer& tok,
                                        const std::vector<harness::Request>& requests,
                                        const GenerateUntilOptions& options) {
  if (options.prefill_chunk < 0)
    throw Error("generate_until: prefill_chunk must be >= 0 (0 = the whole prompt), got " +
                std::to_string(options.prefill_chunk));
  for (const auto& r : requests) {
    if (r.type != harness::RequestType::generate_until)
      throw Error("generate_until: document " + std::to_string(r.doc_id) + " sent a " +
                  harness::request_type_name(r.type) + " request");
    if (r.arguments.size() != 1)
      throw Error("generate_until: document " + std::to_string(r.doc_id) + " sent " +
                  std::to_string(r.arguments.size()) + " arguments (expected the context alone)");
    if (r.max_gen_toks < 0)
      throw Error("generate_until: document " + std::to_string(r.doc_id) + ": max_gen_toks " +
                  std::to_string(r.max_gen_toks) + " is negative");
  }
  std::vector<std::string> out;
  out.reserve(requests.size());
  for (const auto& r : requests) {
    if (stop_requested()) throw Error(std::string("interrupted by ") + stop_signal_name());
    try {
      out.push_back(answer_one(model, tok, r, options));
    } catch (const Error& e) {
      throw Error("document " + std::to_string(r.doc_id) + ": " + e.what());
    }
    if (options.progress) options.progress(static_cast<int64_t>(out.size()));
  }
  return out;
}

}  // namespace mnemo
