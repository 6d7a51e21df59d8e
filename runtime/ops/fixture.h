// Kernel oracle fixtures (shared/fixtures/kernels, conventions in its README.md): loading a
// fixture file, comparing an op's outputs with it by the README's rule, and running every
// form of a registered op against it (used by `mnemo check-kernel` and the fixture tests).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/ops/kernel_ops.h"

namespace mnemo {

// $MNEMO_FIXTURES_DIR if set, else <data_dir()>/../fixtures/kernels.
std::string fixtures_dir();
// The *.json files of a directory, sorted by name (throws Error if it is not a directory).
std::vector<std::string> list_fixture_files(const std::string& dir);

struct Fixture {
  std::string path;
  std::string op;         // "op"
  std::string case_name;  // "case" (may be empty)
  std::string layout;     // "layout" (may be empty)
  json params;            // "params" ({} when absent)
  TensorMap inputs;       // fp64, shapes as stored
  TensorMap outputs;      // fp64
  json tolerance_hint;    // per output: {"float64": {"rtol","atol"}, "float32": {...}, ...}
};

// Parses and validates a fixture file; a malformed file throws Error naming the file and field.
Fixture load_fixture(const std::string& path);
// {"shape": [...], "dtype": "float64", "data": [...]} -> fp64 tensor; `where` names the field.
torch::Tensor tensor_from_json(const json& j, const std::string& where);

// Comparison of one output by the README rule, elementwise:
//   |actual - expected| <= atol + rtol * |expected|
// with (rtol, atol) = tolerance_hint[name][precision] ("float64" or "float32").
struct OutputComparison {
  std::string name;
  double max_abs_err = 0;  // max |actual - expected|
  double max_rel_err = 0;  // max |actual - expected| / max |expected|
  double rtol = 0, atol = 0;
  bool pass = false;
  std::string problem;  // non-empty when the output is missing, misshapen or non-finite
};

OutputComparison compare_output(const std::string& name, const torch::Tensor& actual,
                                const torch::Tensor& expected, double rtol, double atol);
// Looks up (rtol, atol) in the fixture's tolerance_hint; throws Error naming the file and field.
std::pair<double, double> fixture_tolerance(const Fixture& f, const std::string& output,
                                            const std::string& precision);

// One run of one form of an op on a fixture.
struct FormCheck {
  std::string form;        // "recurrent", "chunk", ...
  int64_t chunk_size = 0;  // for chunked forms, else 0: the size the op ran (KernelOp::chunk_used)
  int64_t requested_chunk_size = 0;  // the size asked for, where the op ran another
  std::vector<OutputComparison> outputs;
  std::string error;  // the op threw (message), or produced no such output
  bool pass() const;
  std::string label() const;  // "recurrent", "chunk(C=16)"
};

// Runs every form of `op` (forms whose name contains "chunk" once per chunk size) on the
// fixture's inputs cast to `precision` ("float64" | "float32") on `device` and compares every output listed
// in the fixture (on the host).
std::vector<FormCheck> check_fixture(const Fixture& f, const KernelOp& op,
                                     const std::vector<int64_t>& chunk_sizes,
                                     const std::string& precision = "float64",
                                     const torch::Device& device = torch::kCPU);

}  // namespace mnemo
