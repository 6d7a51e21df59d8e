#include "runtime/linear_attn/chunking.h"

#include <sstream>

namespace mnemo {

torch::ScalarType recurrence_dtype(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

static std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s << ",";
    if (shape[i] < 0) s << "*"; else s << shape[i];
  }
  s << "]";
  return s.str();
}

void check_shape(const std::string& op, const std::string& name, const torch::Tensor& t,
                 const std::vector<int64_t>& shape) {
  if (!t.defined()) throw Error(op + ": input '" + name + "' is missing");
  bool ok = t.dim() == static_cast<int64_t>(shape.size());
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || t.size(i) == shape[i];
  if (!ok)
    throw Error(op + ": input '" + name + "' must have shape " + shape_string(shape) + " but has " +
                shape_string(t.sizes().vec()));
}

void check_chunking(const std::string& op, int64_t T, int64_t chunk_size) {
  if (T < 1) throw Error(op + ": sequence length must be >= 1, got " + std::to_string(T));
  if (chunk_size < 1) throw Error(op + ": chunk_size must be >= 1, got " + std::to_string(chunk_size));
}

torch::Tensor pad_time(const torch::Tensor& x, int64_t chunk) {
  const int64_t T = x.size(1), pad = (chunk - T % chunk) % chunk;
  if (pad == 0) return x;
  auto shape = x.sizes().vec();
  shape[1] = pad;
  return torch::cat({x, torch::zeros(shape, x.options())}, 1);
}

torch::Tensor to_chunks(const torch::Tensor& x, int64_t chunk) {
  auto p = pad_time(x, chunk);
  auto shape = p.sizes().vec();  // [B, Tp, H, rest...]
  std::vector<int64_t> split = {shape[0], shape[1] / chunk, chunk};
  split.insert(split.end(), shape.begin() + 2, shape.end());  // [B, N, C, H, rest...]
  auto y = p.reshape(split);
  std::vector<int64_t> perm = {0, 3, 1, 2};
  for (int64_t d = 4; d < y.dim(); ++d) perm.push_back(d);
  return y.permute(perm).contiguous();  // [B, H, N, C, rest...]
}

torch::Tensor from_chunks(const torch::Tensor& y, int64_t T) {
  std::vector<int64_t> perm = {0, 2, 3, 1};
  for (int64_t d = 4; d < y.dim(); ++d) perm.push_back(d);
  auto p = y.permute(perm);  // [B, N, C, H, rest...]
  auto shape = p.sizes().vec();
  std::vector<int64_t> merged = {shape[0], shape[1] * shape[2]};
  merged.insert(merged.end(), shape.begin() + 3, shape.end());
  return p.reshape(merged).slice(1, 0, T);
}

bool decay_factorisable(const torch::Tensor& b_cum) {
  if (b_cum.numel() == 0) return true;
  const double limit = b_cum.scalar_type() == torch::kFloat64 ? 300.0 : 40.0;
  const double span = b_cum.detach().abs().max().item<double>();
  return span <= limit;  // false for NaN
}

torch::Tensor causal_mask(int64_t n, const torch::Device& device, bool strict) {
  auto opts = torch::TensorOptions().dtype(torch::kBool).device(device);
  return torch::ones({n, n}, opts).tril(strict ? -1 : 0);
}

}  // namespace mnemo
