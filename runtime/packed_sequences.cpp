#include "runtime/packed_sequences.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "core/common.h"

namespace mnemo {

int64_t PackedSequences::max_length() const {
  int64_t m = 0;
  for (int64_t i = 0; i < count(); ++i) m = std::max(m, length(i));
  return m;
}

PackedSequences PackedSequences::from_bounds(std::vector<int64_t> bounds, const torch::Device& device) {
  if (bounds.size() < 2 || bounds.front() != 0)
    throw Error("packed sequences: cu_seqlens must start at 0 and hold at least one sequence");
  for (size_t i = 1; i < bounds.size(); ++i)
    if (bounds[i] <= bounds[i - 1])
      throw Error("packed sequences: cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(bounds[i]) +
                  " is not above cu_seqlens[" + std::to_string(i - 1) + "] = " + std::to_string(bounds[i - 1]) +
                  " (every sequence holds at least one token)");
  if (bounds.back() > std::numeric_limits<int32_t>::max())
    throw Error("packed sequences: " + std::to_string(bounds.back()) + " tokens do not fit cu_seqlens' int32");
  PackedSequences s;
  s.bounds = std::move(bounds);
  std::vector<int32_t> cu(s.bounds.begin(), s.bounds.end());
  s.cu_seqlens = torch::tensor(cu, torch::kInt32).to(device);
  auto pos = torch::empty({s.total()}, torch::kInt64);
  auto* p = pos.data_ptr<int64_t>();
  for (int64_t i = 0; i < s.count(); ++i)
    for (int64_t t = s.bounds[size_t(i)]; t < s.bounds[size_t(i + 1)]; ++t) p[t] = t - s.bounds[size_t(i)];
  s.positions = pos.to(device);
  s.buckets = padded_buckets(s, device);
  s.unbucket = unbucket_permutation(s.buckets, s.total());
  return s;
}

PackedSequences PackedSequences::from_starts(const torch::Tensor& starts, const torch::Device& device) {
  if (starts.dim() != 2 || starts.scalar_type() != torch::kBool)
    throw Error("packed sequences: sequence starts must be a bool [batch, time] tensor");
  auto host = starts.to(torch::kCPU).contiguous();
  const int64_t B = host.size(0), T = host.size(1);
  const bool* s = host.data_ptr<bool>();
  std::vector<int64_t> bounds;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      if (t == 0 || s[b * T + t]) bounds.push_back(b * T + t);
  bounds.push_back(B * T);
  return from_bounds(std::move(bounds), device);
}

std::vector<PaddedBucket> padded_buckets(const PackedSequences& seqs, const torch::Device& device) {
  std::vector<int64_t> order(size_t(seqs.count()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return seqs.length(a) > seqs.length(b); });
  std::vector<PaddedBucket> out;
  size_t i = 0;
  while (i < order.size()) {
    const int64_t L = seqs.length(order[i]);
    size_t j = i;
    while (j < order.size() && 2 * seqs.length(order[j]) >= L) ++j;
    PaddedBucket b;
    b.rows = int64_t(j - i);
    b.length = L;
    std::vector<int64_t> gather(size_t(b.rows * L), seqs.total()), scatter, packed;
    for (int64_t r = 0; r < b.rows; ++r) {
      const int64_t s = order[i + size_t(r)], begin = seqs.bounds[size_t(s)];
      for (int64_t t = 0; t < seqs.length(s); ++t) {
        gather[size_t(r * L + t)] = begin + t;
        scatter.push_back(r * L + t);
        packed.push_back(begin + t);
      }
    }
    b.gather = torch::tensor(gather, torch::kInt64).to(device);
    b.scatter = torch::tensor(scatter, torch::kInt64).to(device);
    b.packed = torch::tensor(packed, torch::kInt64).to(device);
    out.push_back(std::move(b));
    i = j;
  }
  return out;
}

torch::Tensor unbucket_permutation(const std::vector<PaddedBucket>& buckets, int64_t total) {
  std::vector<torch::Tensor> packed;
  for (const auto& b : buckets) packed.push_back(b.packed);
  auto where = torch::cat(packed);  // where[j] = the packed position of the j-th concatenated token
  auto inverse = torch::empty({total}, where.options());
  inverse.index_put_({where}, torch::arange(total, where.options()));
  return inverse;
}

torch::Tensor padded_rows(const torch::Tensor& packed, const PaddedBucket& bucket) {
  auto with_zero = torch::cat({packed, torch::zeros({1, packed.size(1)}, packed.options())});  // slot `total`
  return with_zero.index_select(0, bucket.gather).view({bucket.rows, bucket.length, packed.size(1)});
}

torch::Tensor unpad_rows(const torch::Tensor& rows, const PaddedBucket& bucket) {
  return rows.reshape({bucket.rows * bucket.length, rows.size(-1)}).index_select(0, bucket.scatter);
}

torch::Tensor unbucket_rows(const std::vector<torch::Tensor>& parts, const PackedSequences& seqs) {
  return torch::cat(parts).index_select(0, seqs.unbucket);
}

namespace {
thread_local int packed_host_forms_depth = 0;
}

PackedHostFormsScope::PackedHostFormsScope() { ++packed_host_forms_depth; }
PackedHostFormsScope::~PackedHostFormsScope() { --packed_host_forms_depth; }

bool packed_forms_enabled(const torch::Tensor& like, bool kernels_available) {
  return packed_host_forms_depth > 0 || (like.is_cuda() && kernels_available);
}

}  // namespace mnemo
