#include "engine/training/data_source.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "runtime/device.h"
#include "tasks/text_utils.h"
#include "tasks/token_batch.h"

namespace mnemo {

namespace {

// Token tasks: seeded epoch permutations of the training examples (as before the data-source refactoring: a run with
// grad_accum 1 draws the same examples in the same order).
class TokenTaskSource : public DataSource {
 public:
  TokenTaskSource(const TokenTask& task, int64_t n_train, int64_t batch_size, int64_t grad_accum, uint64_t seed,
                  torch::Device device)
      : task_(task), n_(n_train), b_(batch_size), a_(grad_accum), seed_(seed), device_(device) {
    if (n_ > 0) train_ = task.examples(Split::train, n_, seed);
  }
  TrainBatch batch(int64_t step, int64_t micro) override {
    const int64_t row0 = (step * a_ + micro) * b_;
    std::vector<TokenExample> fresh;
    std::vector<const TokenExample*> ex;
    if (n_ > 0) {
      for (int64_t j = 0; j < b_; ++j) ex.push_back(&train_[example_index(row0 + j)]);
    } else {
      fresh = task_.examples(Split::train, b_, seed_ + static_cast<uint64_t>(row0));
      for (auto& e : fresh) ex.push_back(&e);
    }
    TokenBatch tb = collate(ex, device_);
    TrainBatch out{tb.input_ids, tb.labels, tb.input_ids.numel(), 0};
    out.labelled = (tb.labels != -100).sum().item<int64_t>();
    return out;
  }
  json position(int64_t steps) const override {
    const int64_t rows = steps * a_ * b_;
    return {{"rows", rows}, {"epoch", n_ > 0 ? rows / n_ : 0}};
  }

 private:
  int64_t example_index(int64_t g) {
    const int64_t epoch = g / n_;
    if (epoch != epoch_) {
      perm_.resize(size_t(n_));
      std::iota(perm_.begin(), perm_.end(), 0);
      std::mt19937_64 rng(seed_ * 1000003ULL + static_cast<uint64_t>(epoch));
      std::shuffle(perm_.begin(), perm_.end(), rng);
      epoch_ = epoch;
    }
    return perm_[size_t(g % n_)];
  }
  const TokenTask& task_;
  int64_t n_, b_, a_;
  uint64_t seed_;
  torch::Device device_;
  std::vector<TokenExample> train_;
  int64_t epoch_ = -1;
  std::vector<int64_t> perm_;
};

class CorpusSource : public DataSource {
 public:
  CorpusSource(const TokenShard& shard, const CorpusWindows& o, torch::Device device)
      : shard_(shard), o_(o), device_(device) {
    const int64_t W = o_.seq_len + 1;
    if (o_.packing) {
      if (shard_.size() < W)
        throw Error("the training shard has " + std::to_string(shard_.size()) + " tokens, fewer than seq_len + 1 = " +
                    std::to_string(W));
      n_windows_ = (shard_.size() - 1) / o_.seq_len;
    } else {
      // Windows inside one document: document d offers len_d - W + 1 start positions.
      const auto& starts = shard_.document_starts();
      int64_t longest = 0;
      for (size_t d = 0; d < starts.size(); ++d) {
        const int64_t end = d + 1 < starts.size() ? starts[d + 1] : shard_.size();
        const int64_t len = end - starts[d];
        longest = std::max(longest, len);
        if (len >= W) {
          docs_.push_back({starts[d], len});
          total_starts_ += len - W + 1;
          n_windows_ += (len - 1) / o_.seq_len;
        }
      }
      if (docs_.empty())
        throw Error("seq_len " + std::to_string(o_.seq_len) + " + 1 is longer than every document of the training "
                    "corpus (longest: " + std::to_string(longest) + " tokens) and packing is off; lower seq_len or "
                    "set packing true");
      for (const auto& d : docs_) cum_starts_.push_back((cum_starts_.empty() ? 0 : cum_starts_.back()) + d.len - W + 1);
      for (const auto& d : docs_) cum_windows_.push_back((cum_windows_.empty() ? 0 : cum_windows_.back()) + (d.len - 1) / o_.seq_len);
    }
  }

  TrainBatch batch(int64_t step, int64_t micro) override {
    const int64_t T = o_.seq_len, B = o_.batch_size, row0 = (step * o_.grad_accum + micro) * B;
    auto ids = torch::empty({B, T}, torch::kInt64), lab = torch::empty({B, T}, torch::kInt64);
    std::vector<int64_t> win(size_t(T + 1));
    for (int64_t j = 0; j < B; ++j) {
      shard_.read(window_start(row0 + j), T + 1, win.data());
      std::copy(win.begin(), win.end() - 1, ids.data_ptr<int64_t>() + j * T);
      std::copy(win.begin() + 1, win.end(), lab.data_ptr<int64_t>() + j * T);
    }
    TrainBatch b{to_device(ids, device_), to_device(lab, device_), B * T, B * T};
    // reset_state_at_bos: a document starts at every BOS (and every row starts a sequence); the last token before
    // a BOS keeps its label, the BOS, as in the stream.
    if (o_.reset_at_bos) b.sequence_starts = ids == o_.bos_id;
    return b;
  }

  json position(int64_t steps) const override {
    const int64_t rows = steps * o_.grad_accum * o_.batch_size;
    return {{"rows", rows}, {"windows_per_epoch", n_windows_},
            {"epoch", n_windows_ > 0 ? double(rows) / double(n_windows_) : 0.0}, {"sampler", o_.sampler}};
  }

 private:
  struct Doc {
    int64_t start, len;
  };
  // Start token of window row r.
  int64_t window_start(int64_t r) const {
    const int64_t T = o_.seq_len, W = T + 1;
    if (o_.sampler == "sequential") {
      const int64_t k = r % n_windows_;
      if (o_.packing) return k * T;
      const size_t d = size_t(std::upper_bound(cum_windows_.begin(), cum_windows_.end(), k) - cum_windows_.begin());
      const int64_t before = d == 0 ? 0 : cum_windows_[d - 1];
      return docs_[d].start + (k - before) * T;
    }
    SampleRng rng(sample_seed(o_.seed, r, true));
    if (o_.packing) return int64_t(rng.below(uint64_t(shard_.size() - W + 1)));
    const int64_t u = int64_t(rng.below(uint64_t(total_starts_)));
    const size_t d = size_t(std::upper_bound(cum_starts_.begin(), cum_starts_.end(), u) - cum_starts_.begin());
    const int64_t before = d == 0 ? 0 : cum_starts_[d - 1];
    return docs_[d].start + (u - before);
  }

  const TokenShard& shard_;
  CorpusWindows o_;
  torch::Device device_;
  int64_t n_windows_ = 0, total_starts_ = 0;
  std::vector<Doc> docs_;
  std::vector<int64_t> cum_starts_, cum_windows_;
};

}  // namespace

std::unique_ptr<DataSource> make_token_task_source(const TokenTask& task, int64_t n_train, int64_t batch_size,
                                                   int64_t grad_accum, uint64_t seed, const torch::Device& device) {
  return std::make_unique<TokenTaskSource>(task, n_train, batch_size, grad_accum, seed, device);
}

std::unique_ptr<DataSource> make_corpus_source(const TokenShard& shard, const CorpusWindows& opt,
                                               const torch::Device& device) {
  if (opt.seq_len < 1 || opt.batch_size < 1 || opt.grad_accum < 1)
    throw Error("corpus windows: seq_len, batch_size and grad_accum must be >= 1");
  if (opt.reset_at_bos && opt.bos_id < 0) throw Error("reset_state_at_bos needs a tokenizer with a BOS token");
  return std::make_unique<CorpusSource>(shard, opt, device);
}

namespace {

class RankShare : public DataSource {
 public:
  RankShare(std::unique_ptr<DataSource> whole, int rank, int world)
      : whole_(std::move(whole)), rank_(rank), world_(world) {}
  TrainBatch batch(int64_t step, int64_t micro) override {
    TrainBatch all = whole_->batch(step, micro);
    const int64_t rows = all.input_ids.size(0);
    if (rows < world_)
      throw Error("data-parallel: a micro-batch of " + std::to_string(rows) + " rows cannot be shared by " +
                  std::to_string(world_) + " ranks (raise batch_size)");
    const int64_t r0 = rank_ * rows / world_, r1 = (rank_ + 1) * rows / world_;
    TrainBatch mine;
    mine.input_ids = all.input_ids.narrow(0, r0, r1 - r0);
    mine.labels = all.labels.narrow(0, r0, r1 - r0);
    if (all.sequence_starts.defined()) mine.sequence_starts = all.sequence_starts.narrow(0, r0, r1 - r0);
    mine.tokens = all.tokens * (r1 - r0) / rows;
    mine.labelled = (mine.labels != -100).sum().item<int64_t>();
    mine.labelled_all_ranks = all.labelled;
    return mine;
  }
  json position(int64_t steps) const override { return whole_->position(steps); }

 private:
  std::unique_ptr<DataSource> whole_;
  int rank_, world_;
};

}  // namespace

std::unique_ptr<DataSource> make_rank_share(std::unique_ptr<DataSource> whole, int rank, int world) {
  if (world <= 1) return whole;
  return std::make_unique<RankShare>(std::move(whole), rank, world);
}

}  // namespace mnemo
