// Helpers shared by the tests: running the mnemo binary, temp dirs, tensor comparison.
#pragma once
#include <torch/torch.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>
#include "file_util.h"

namespace mnemo::test {

struct CommandResult {
  int exit_code;
  std::string output;  // stdout + stderr
};

// Runs a shell command line; its exit status and what it printed on the streams it sends to stdout.
inline CommandResult run_shell(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Runs `mnemo <args>` (the binary built beside the tests) through the shell, under a command prefix such as
// "env -u VAR NAME=value" (run_mnemo: none).
inline CommandResult run_mnemo_env(const std::string& prefix, const std::string& args) {
  return run_shell(prefix + " " + std::string(MNEMO_BINARY) + " " + args + " 2>&1");
}

inline CommandResult run_mnemo(const std::string& args) { return run_mnemo_env("", args); }

inline std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("mnemo_test_" + name + "_" + std::to_string(::getpid()));
  mnemo::test::remove_dir_tree(p);
  std::filesystem::create_directories(p);
  return p;
}

// max |a − b| / max(max |b|, floor), both cast to fp64. The floor keeps a reference that is zero up to
// rounding (e.g. a gradient that vanishes mathematically) from turning 1e-17 of rounding into a huge relative
// error; form-vs-form gradient comparisons with O(1) inputs pass 1e-6.
inline double max_rel_err(const torch::Tensor& a, const torch::Tensor& b, double floor = 1e-30) {
  auto a64 = a.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  auto d = (a64 - b64).abs().max().item<double>();
  auto s = b64.abs().max().item<double>();
  return d / std::max(s, floor);
}

// flash-linear-attention's measure of a low-precision result: ‖a − b‖₂ / ‖b‖₂ over all entries, in fp64.
inline double error_ratio(const torch::Tensor& a, const torch::Tensor& b) {
  auto a64 = a.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  return ((a64 - b64).norm() / b64.norm()).item<double>();
}

// Standard normal fp64 tensor of `shape` (from the global torch generator).
inline torch::Tensor randn_f64(std::vector<int64_t> shape) {
  return torch::randn(shape, torch::TensorOptions().dtype(torch::kFloat64));
}

// Largest max_rel_err over matching pairs of gradient lists (fp64 form-vs-form comparisons); +inf on a size
// mismatch or when exactly one side of a pair is undefined.
inline double max_rel_err_all(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined()) return std::numeric_limits<double>::infinity();
    if (a[i].defined()) worst = std::max(worst, max_rel_err(a[i], b[i]));
  }
  return worst;
}

// Sets LibTorch's default dtype for the scope (e.g. fp64 for equality checks), restores it after.
struct DefaultDtype {
  explicit DefaultDtype(caffe2::TypeMeta t) : saved(torch::get_default_dtype()) { torch::set_default_dtype(t); }
  ~DefaultDtype() { torch::set_default_dtype(saved); }
  caffe2::TypeMeta saved;
};

}  // namespace mnemo::test
