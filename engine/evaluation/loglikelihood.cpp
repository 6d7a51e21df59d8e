// lm-eval's loglikelihood primitive on token ids (docs/tasks.md#evaluation-machinery; external: EleutherAI/lm-evaluation-harness
// lm_eval/models/huggingface.py HFLM._loglikelihood_tokens, `_collate`, `_select_cont_toks`; lm_eval/models/utils.py
// Collator, pad_and_concat). Each request is its own row of a batch (fresh state); rows are right-padded, so padded
// positions come after every real one and, models being causal (mixer contract), never change what is read.
// lm-eval's one-token-continuation cache (Collator group_by="contexts") is NOT reproduced: it reuses one row's logits
// for requests with the same input, which is equal to recomputing them only up to the batch composition; every
// request here is computed in its own row.
#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "core/common.h"
#include "engine/evaluation/model_adapter.h"

namespace mnemo {

namespace {
int64_t joint_at(const TokenPair& p, size_t j) {
  return j < p.first.size() ? p.first[j] : p.second[j - p.first.size()];
}

void check_request(const TokenPair& r, size_t i, int64_t max_length, int64_t vocab) {
  const std::string which = "loglikelihood request " + std::to_string(i);
  if (r.first.empty()) throw Error(which + ": the context is empty (encode_pair gives it the prefix token)");
  if (r.second.empty()) throw Error(which + ": the continuation is empty (lm-eval asserts it is not)");
  if (static_cast<int64_t>(r.second.size()) > max_length)
    throw Error(which + ": the continuation has " + std::to_string(r.second.size()) + " tokens, more than max_length " +
                std::to_string(max_length));
  for (const auto* part : {&r.first, &r.second})
    for (int64_t id : *part)
      if (id < 0 || id >= vocab)
        throw Error(which + ": token id " + std::to_string(id) + " is outside the model's vocabulary [0, " +
                    std::to_string(vocab) + ")");
}
}  // namespace

std::vector<size_t> loglikelihood_order(const std::vector<TokenPair>& requests) {
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Python: sorted(arr, key=lambda r: (-len(r.ctx + r.cont), tuple(r.ctx + r.cont))), a stable sort.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TokenPair &x = requests[a], &y = requests[b];
    const size_t lx = x.first.size() + x.second.size(), ly = y.first.size() + y.second.size();
    if (lx != ly) return lx > ly;
    for (size_t j = 0; j < lx; ++j) {
      const int64_t u = joint_at(x, j), v = joint_at(y, j);
      if (u != v) return u < v;
    }
    return false;
  });
  return order;
}

std::vector<std::pair<double, bool>> language_model_loglikelihood(LanguageModelImpl& model, const torch::Device& device,
                                                                  const std::vector<TokenPair>& requests,
                                                                  int64_t batch_size, int64_t max_length) {
  if (batch_size < 1) throw Error("loglikelihood: batch_size must be >= 1, got " + std::to_string(batch_size));
  if (max_length < 1) throw Error("loglikelihood: max_length must be >= 1, got " + std::to_string(max_length));
  const int64_t vocab = model.config().vocab_size;
  for (size_t i = 0; i < requests.size(); ++i) check_request(requests[i], i, max_length, vocab);
  const std::vector<size_t> order = loglikelihood_order(requests);
  std::vector<std::pair<double, bool>> out(requests.size(), {0.0, true});

  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  size_t start = 0;
  int64_t padlen = 0;
  try {
    for (; start < order.size(); start += static_cast<size_t>(batch_size)) {
      const size_t end = std::min(order.size(), start + static_cast<size_t>(batch_size));
      const int64_t B = static_cast<int64_t>(end - start);
      // inp = (context + continuation)[-(max_length + 1):][:-1]; its last len(cont) positions predict the
      // continuation. Sorted longest first, so the first row sets the padded length.
      std::vector<int64_t> inplen(B), first(B);
      padlen = 0;
      for (int64_t b = 0; b < B; ++b) {
        const TokenPair& r = requests[order[start + b]];
        const int64_t total = static_cast<int64_t>(r.first.size() + r.second.size());
        const int64_t keep = std::min(total, max_length + 1);
        first[b] = total - keep;
        inplen[b] = keep - 1;
        padlen = std::max(padlen, inplen[b]);
      }
      std::vector<int64_t> ids(static_cast<size_t>(B * padlen), 0);  // right padding; the pad id is never read
      std::vector<int64_t> rows, pos, targets;
      for (int64_t b = 0; b < B; ++b) {
        const TokenPair& r = requests[order[start + b]];
        for (int64_t t = 0; t < inplen[b]; ++t) ids[b * padlen + t] = joint_at(r, static_cast<size_t>(first[b] + t));
        const int64_t contlen = static_cast<int64_t>(r.second.size());
        for (int64_t k = 0; k < contlen; ++k) {
          rows.push_back(b);
          pos.push_back(inplen[b] - contlen + k);
          targets.push_back(r.second[k]);
        }
      }
      const auto ids_t = torch::from_blob(ids.data(), {B, padlen}, i64).clone().to(device);
      // The LM head at the continuation positions alone (the context's logits are never read).
      std::vector<int64_t> flat(rows.size());
      for (size_t k = 0; k < rows.size(); ++k) flat[k] = rows[k] * padlen + pos[k];
      auto sel = model.forward_rows(ids_t, torch::from_blob(flat.data(), {(int64_t)flat.size()}, i64).clone().to(device));
      if (sel.scalar_type() != torch::kFloat64) sel = sel.to(torch::kFloat32);  // fp32 log_softmax (fp64 stays)
      const auto lp = torch::log_softmax(sel, -1);
      const auto tgt = torch::from_blob(targets.data(), {(int64_t)targets.size()}, i64).clone().to(device);
      const auto tok_lp = lp.gather(1, tgt.unsqueeze(1)).squeeze(1).to(torch::kFloat64).cpu().contiguous();
      const auto greedy = lp.argmax(-1).eq(tgt).cpu().contiguous();
      const double* v = tok_lp.data_ptr<double>();
      const bool* g = greedy.data_ptr<bool>();
      for (size_t k = 0; k < rows.size(); ++k) {
        auto& o = out[order[start + static_cast<size_t>(rows[k])]];
        o.first += v[k];
        o.second = o.second && g[k];
      }
    }
  } catch (const c10::Error& e) {
    if (was_training) model.train();
    const std::string what = e.what_without_backtrace();
    if (what.find("alloc") != std::string::npos || what.find("out of memory") != std::string::npos)
      throw Error("loglikelihood: a batch of " + std::to_string(std::min(order.size() - start, (size_t)batch_size)) +
                  " requests of " + std::to_string(padlen) + " tokens does not fit in memory for model '" +
                  model.config().model + "'; use a smaller --batch-size or --max-length");
    throw;
  } catch (...) {
    if (was_training) model.train();
    throw;
  }
  if (was_training) model.train();
  return out;
}

}  // namespace mnemo
