#include "runtime/kernels/kernel_counts.h"

#include <mutex>
#include <sstream>

namespace mnemo {
namespace {

std::mutex& counts_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, int64_t>& counts() {
  static std::map<std::string, int64_t> c;
  return c;
}

}  // namespace

const char* products_label(torch::ScalarType element, bool bf16_products) {
  if (bf16_products || element == torch::kBFloat16) return "bf16 products";
  return element == torch::kFloat64 ? "fp64 products" : "fp32 products";
}

void count_kernel_pass(const std::string& kernel, const torch::Tensor& like, const char* products) {
  const std::string key = kernel + " (" + (like.is_cuda() ? "cuda" : "host grid") + ", " + products + ")";
  const std::lock_guard<std::mutex> lock(counts_mutex());
  ++counts()[key];
}

std::map<std::string, int64_t> kernel_pass_counts() {
  const std::lock_guard<std::mutex> lock(counts_mutex());
  return counts();
}

void reset_kernel_pass_counts() {
  const std::lock_guard<std::mutex> lock(counts_mutex());
  counts().clear();
}

std::string describe_kernel_pass_counts() {
  std::ostringstream out;
  for (const auto& [key, n] : kernel_pass_counts()) out << (out.tellp() > 0 ? ", " : "") << key << " x" << n;
  return out.str();
}

}  // namespace mnemo
