// The chunk state-pass kernel (runtime/kernels/state_pass_kernel.cuh) behind chunk_state_scan and
// chunk_delta_state_scan (runtime/kernels/chunking.h), forward and backward in one pass each:
//   [cuda-kernel][state_pass]   its block code over the host grid (StatePassKernelHostScope) against the eager chunk
//                               loop in fp64 (the chunk-start states, X, the final state; the gradient of every
//                               input): plain and delta forms, a decay per row or one per chunk, with and without
//                               the chunks' own increments, one to several column tiles (a partial last tile); in
//                               fp32 against the fp64 truth; the layers whose chunk forms use it (Kimi Delta
//                               Attention, RWKV-7, GSA, MesaNet, eager GLA and RetNet, the log-linear layers' level
//                               groups) against their recurrent forms; the kernel ops' form fused_chunk (kda, rwkv7,
//                               mesa_net, log_linear_gdn, log_linear_attn) on it, chunk not;
//   [.cuda-kernels_state_pass]  on a CUDA device: the CUDA kernel against the host run, and those layers on a GPU
//                               against their recurrent forms (CTest cuda.kernels_state_pass, skipped without a GPU).
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/host_grid.h"
#include "runtime/ops/kernel_ops.h"
#include "tests/mixer_test_util.h"

using namespace mnemo;
using namespace mnemo::test;

// Helpers in a named namespace: unity builds compile this file with other test files.
namespace state_pass_kernel_tests {

const std::vector<std::string> kPlainNames = {"decay", "increments", "initial"};
const std::vector<std::string> kDeltaNames = {"W", "U", "B", "row_decay", "initial", "increments"};

// Decays in (0, 1]: e^{−U(0, 2)}.
torch::Tensor decays(std::vector<int64_t> shape) { return torch::exp(-2.0 * torch::rand(shape, torch::kFloat64)); }

// The pass under test on one route: the host grid (kernel = true, checking that a pass ran) or the eager loop.
KernelFn plain_pass(bool kernel) {
  return [kernel](const std::vector<torch::Tensor>& in) {
    const StatePassKernelHostScope scope(kernel);
    CHECK(state_pass_kernel_route(in[1]) == kernel);
    const int64_t before = state_pass_kernel_passes();
    auto r = chunk_state_scan(in[0], in[1], in[2]);
    CHECK(state_pass_kernel_passes() - before == (kernel ? 1 : 0));
    return std::vector<torch::Tensor>{r.starts, r.final_state};
  };
}

KernelFn delta_pass(bool kernel) {
  return [kernel](const std::vector<torch::Tensor>& in) {
    const StatePassKernelHostScope scope(kernel);
    const int64_t before = state_pass_kernel_passes();
    auto r = chunk_delta_state_scan(in[0], in[1], in[2], in[3], in.size() > 5 ? in[5] : torch::Tensor(), in[4]);
    CHECK(state_pass_kernel_passes() - before == (kernel ? 1 : 0));
    return std::vector<torch::Tensor>{r.starts, r.corrected, r.final_state};
  };
}

// Delta-form inputs of a contracting pass: W, B of size ~1/√R so that the states stay O(1) over the chunks.
std::vector<torch::Tensor> delta_inputs(int64_t Bn, int64_t H, int64_t N, int64_t C, int64_t R, int64_t V,
                                        bool increments) {
  const double s = 1.0 / std::sqrt(static_cast<double>(R * C));
  std::vector<torch::Tensor> in = {randn_f64({Bn, H, N, C, R}) * s, randn_f64({Bn, H, N, C, V}),
                                   randn_f64({Bn, H, N, C, R}) * s, decays({Bn, H, N, R, 1}),
                                   randn_f64({Bn, H, R, V})};
  if (increments) in.push_back(randn_f64({Bn, H, N, R, V}));
  return in;
}

}  // namespace state_pass_kernel_tests

using namespace state_pass_kernel_tests;

TEST_CASE("chunk state-pass kernel (host grid) == the eager loop: plain form, fp64",
          "[cuda-kernel][state_pass]") {
  torch::manual_seed(21);
  for (int64_t N : {1, 2, 9})
    for (const auto& [R, V] : std::vector<std::pair<int64_t, int64_t>>{{4, 3}, {16, 150}, {70, 64}})
      for (bool per_row : {true, false}) {
        INFO("N " << N << " R " << R << " V " << V << " decay per row " << per_row);
        const std::vector<torch::Tensor> in = {decays({2, 3, N, per_row ? R : 1, 1}), randn_f64({2, 3, N, R, V}),
                                               randn_f64({2, 3, R, V})};
        require_same_outputs_and_grads(plain_pass(false), plain_pass(true), in, kPlainNames, 1e-13, 1e-12);
      }
}

TEST_CASE("chunk state-pass kernel (host grid) == the eager loop: delta form, fp64",
          "[cuda-kernel][state_pass]") {
  torch::manual_seed(22);
  for (int64_t N : {1, 2, 7})
    for (int64_t C : {1, 8})
      for (const auto& [R, V] : std::vector<std::pair<int64_t, int64_t>>{{4, 3}, {16, 150}})
        for (bool increments : {false, true}) {
          INFO("N " << N << " C " << C << " R " << R << " V " << V << " increments " << increments);
          const auto in = delta_inputs(2, 2, N, C, R, V, increments);
          auto names = kDeltaNames;
          if (!increments) names.pop_back();
          require_same_outputs_and_grads(delta_pass(false), delta_pass(true), in, names, 1e-12, 1e-11);
        }
}

TEST_CASE("chunk state-pass kernel (host grid): lanes, fp32, no autograd",
          "[cuda-kernel][state_pass][lanes]") {
  torch::manual_seed(23);
  const auto in = delta_inputs(1, 2, 5, 8, 12, 70, true);
  {
    // Lanes that take each phase in order and in reverse give the one-lane values (no race inside a phase).
    const auto one = delta_pass(true)(in);
    for (bool reverse : {false, true}) {
      const grid::HostLanesScope lanes(7, reverse);
      const auto many = delta_pass(true)(in);
      for (size_t i = 0; i < one.size(); ++i) CHECK(torch::equal(many[i], one[i]));
    }
  }
  require_fp32_close(delta_pass(false), delta_pass(true), in, kDeltaNames, 1e-5);
  {
    const torch::NoGradGuard no_grad;  // the forward pass alone
    const auto eager = delta_pass(false)(in), kernel = delta_pass(true)(in);
    for (size_t i = 0; i < eager.size(); ++i) CHECK(max_rel_err(kernel[i], eager[i]) <= 1e-13);
  }
  // Out of its scope the CPU does not take the kernel.
  CHECK_FALSE(state_pass_kernel_route(in[0]));
}

TEST_CASE("layers on the chunk state-pass kernel (host grid) == their recurrent forms",
          "[cuda-kernel][state_pass]") {
  // Kimi Delta Attention, RWKV-7 and log-linear Gated DeltaNet's level groups (delta form), GSA's slot pass, MesaNet's
  // statistics, GLA and RetNet on their eager chunk forms and log-linear Mamba-2's level groups (plain form); each runs
  // a forward and a backward pass of the kernel (45 tokens in chunks of 4: the log-linear layers' levels 3 to 5 apart).
  const torch::Device cpu(torch::kCPU);
  const std::vector<std::pair<std::string, json>> layers = {
      {"kda", {{"chunk_size", 16}}},  {"rwkv7", {{"chunk_size", 16}}},
      {"gsa", {{"chunk_size", 16}}},  {"mesa_net", {{"chunk_size", 16}}},
      {"gla", {{"chunk_size", 16}}},  {"retnet", {{"chunk_size", 16}}},
      {"log_linear_gdn", {{"chunk_size", 4}}}, {"log_linear_mamba2", {{"chunk_size", 4}}}};
  for (const auto& [family, args] : layers) {
    INFO(family);
    const StatePassKernelHostScope on_host(true);
    const int64_t before = state_pass_kernel_passes();
    require_chunk_equals_recurrent_on(cpu, family, 2, args);
    CHECK(state_pass_kernel_passes() - before >= 2);
  }
}

TEST_CASE("the kernel ops' form fused_chunk takes the state-pass kernel, chunk does not", "[cuda-kernel][state_pass]") {
  torch::manual_seed(25);
  auto& registry = KernelOpRegistry::instance();
  for (const std::string name : {"kda", "rwkv7", "mesa_net", "log_linear_gdn", "log_linear_attn"}) {
    INFO(name);
    const auto& op = registry.at(name);
    auto bench = op.random_inputs(2, 37, 2, 8);
    TensorMap inputs;
    for (const auto& [key, t] : bench.inputs) inputs[key] = t.to(torch::kFloat64);
    int64_t before = state_pass_kernel_passes();
    const auto chunk = op.run(inputs, bench.params, "chunk", 16);
    CHECK(state_pass_kernel_passes() == before);
    const auto fused = op.run(inputs, bench.params, "fused_chunk", 16);
    CHECK(state_pass_kernel_passes() > before);
    for (const auto& [key, t] : chunk) {
      INFO(key);
      CHECK(max_rel_err(fused.at(key), t) <= 1e-12);
    }
  }
}

TEST_CASE("chunk state-pass kernel on a CUDA device == its host run",
          "[.cuda-kernels_state_pass]") {
  REQUIRE(torch::cuda::is_available());
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(24);
  // Kimi Delta Attention's shapes at head dim 128 (two column tiles), 32 chunks of 64, and a ragged small one.
  for (const auto& [N, C, R, V] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{{32, 64, 128, 128}, {3, 5, 7, 70}}) {
    INFO("N " << N << " C " << C << " R " << R << " V " << V);
    const auto in = delta_inputs(2, 4, N, C, R, V, true);
    for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
      INFO("dtype " << dtype);
      std::vector<torch::Tensor> host, dev;
      for (const auto& t : in) {
        host.push_back(t.to(dtype).requires_grad_(true));
        dev.push_back(t.to(dtype).to(cuda).requires_grad_(true));
      }
      const auto on_host = delta_pass(true)(host);
      const int64_t before = state_pass_kernel_passes();
      auto r = chunk_delta_state_scan(dev[0], dev[1], dev[2], dev[3], dev[5], dev[4]);  // CUDA tensors: the kernel
      const std::vector<torch::Tensor> on_device = {r.starts, r.corrected, r.final_state};
      torch::Tensor loss_host = torch::zeros({}, host[0].options()), loss_dev = torch::zeros({}, dev[0].options());
      for (size_t i = 0; i < on_device.size(); ++i) {
        auto w = torch::randn(on_host[i].sizes(), on_host[i].options());
        loss_host = loss_host + (on_host[i] * w).sum();
        loss_dev = loss_dev + (on_device[i] * w.to(cuda)).sum();
      }
      const auto g_host = torch::autograd::grad({loss_host}, host), g_dev = torch::autograd::grad({loss_dev}, dev);
      CHECK(state_pass_kernel_passes() - before == 2);
      const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
      for (size_t i = 0; i < on_device.size(); ++i) {
        INFO("output " << i);
        const auto expected = on_host[i].detach().to(torch::kFloat64);
        CHECK(max_rel_err(on_device[i].cpu().to(torch::kFloat64), expected, 1e-6) <= tol);
      }
      for (size_t i = 0; i < g_dev.size(); ++i) {
        INFO("gradient " << kDeltaNames[i]);
        CHECK(max_rel_err(g_dev[i].cpu().to(torch::kFloat64), g_host[i].to(torch::kFloat64), 1e-6) <= tol);
      }
    }
  }
  for (const std::string family : {"kda", "rwkv7", "gsa", "mesa_net", "log_linear_gdn", "log_linear_mamba2"}) {
    INFO(family);
    const int64_t before = state_pass_kernel_passes();
    require_chunk_equals_recurrent_on(cuda, family, 2, {{"chunk_size", family.rfind("log_linear", 0) == 0 ? 4 : 16}});
    CHECK(state_pass_kernel_passes() - before >= 2);
  }
}
