// Mamba's selective-scan kernel (runtime/mamba/scan_kernel.cuh), forward and backward in one pass each:
//   [cuda-kernel][mamba]      its block code over the host grid (MambaKernelHostScope) against the token-by-token
//                             scan in fp64 (outputs, final state, the gradient of x, Δ, A, B, C and the incoming
//                             state): T 1 to 100 over chunks of 1 to 64, one and several channel tiles (a partial
//                             last tile), state sizes 4, 16 and 300, decays that underflow (several lanes a block:
//                             tests/test_block_lanes.cpp); in fp32 against
//                             the fp64 truth; packed sequences (cu_seqlens) against each sequence on its own; the
//                             layer through it;
//   [.cuda-kernels_mamba]     on a CUDA device: the CUDA kernel against the host run and the reference, and the layer
//                             on a GPU (CTest cuda.kernels_mamba, skipped without a GPU).
#include <cmath>

#include "runtime/mamba/selective_scan.h"
#include "tests/mixer_test_util.h"

using namespace mnemo;
using namespace mnemo::test;

// Helpers in a named namespace: unity builds compile this file with other test files.
namespace mamba_kernel_tests {

const std::vector<std::string> kScanInputNames = {"x", "dt", "A", "B", "C", "initial_state"};

struct ScanInputs {
  torch::Tensor x, dt, A, B, C, s0;
  std::vector<torch::Tensor> leaves(bool with_state) const {
    std::vector<torch::Tensor> in = {x, dt, A, B, C};
    if (with_state) in.push_back(s0);
    return in;
  }
};

// dt = softplus(N(0, 1) − 1), A = −exp(U(0, ln 16)) per channel and entry; fp64.
ScanInputs scan_inputs(int64_t Bn, int64_t T, int64_t D, int64_t N) {
  return {randn_f64({Bn, T, D}), torch::softplus(randn_f64({Bn, T, D}) - 1.0),
          -torch::exp(torch::rand({D, N}, torch::kFloat64) * std::log(16.0)), randn_f64({Bn, T, N}),
          randn_f64({Bn, T, N}), randn_f64({Bn, D, N})};
}

KernelFn recurrent_scan() {
  return [](const std::vector<torch::Tensor>& in) {
    auto r = selective_scan_recurrent(in[0], in[1], in[2], in[3], in[4], in.size() > 5 ? in[5] : torch::Tensor());
    return std::vector<torch::Tensor>{r.o, r.final_state};
  };
}

// The kernel's block code over the host grid; checks that it ran (a forward and, under autograd, a backward pass).
KernelFn kernel_scan(int64_t chunk) {
  return [chunk](const std::vector<torch::Tensor>& in) {
    const MambaKernelHostScope on_host(true);
    REQUIRE(selective_scan_kernel_eligible(in[0]));
    const int64_t before = mamba_kernel_passes();
    auto r = selective_scan_kernel(in[0], in[1], in[2], in[3], in[4], in.size() > 5 ? in[5] : torch::Tensor(), chunk);
    CHECK(mamba_kernel_passes() - before == 1);
    return std::vector<torch::Tensor>{r.o, r.final_state};
  };
}

// A kernel run's outputs and gradients (of Σ <out, w> with fixed w), for comparing runs.
std::vector<torch::Tensor> outputs_and_grads(const KernelFn& fn, const ScanInputs& c, bool with_state) {
  std::vector<torch::Tensor> leaves;
  for (const auto& t : c.leaves(with_state)) leaves.push_back(t.detach().clone().requires_grad_(true));
  auto out = fn(leaves);
  torch::manual_seed(5);
  torch::Tensor loss = torch::zeros({}, out[0].options());
  for (const auto& o : out) loss = loss + (o * torch::randn(o.sizes(), o.options())).sum();
  auto grads = torch::autograd::grad({loss}, leaves);
  out.insert(out.end(), grads.begin(), grads.end());
  for (auto& t : out) t = t.detach().cpu();
  return out;
}

}  // namespace mamba_kernel_tests

using namespace mamba_kernel_tests;

TEST_CASE("mamba selective-scan kernel (host grid) == the token-by-token scan in fp64: outputs, state, every gradient",
          "[cuda-kernel][mamba]") {
  torch::manual_seed(11);
  for (int64_t T : {1, 7, 63, 100})
    for (int64_t chunk : {1, 5, 16, 64})
      for (bool with_state : {false, true}) {
        INFO("T " << T << " chunk " << chunk << " state " << with_state);
        const auto c = scan_inputs(2, T, 5, 4);
        require_same_outputs_and_grads(recurrent_scan(), kernel_scan(chunk), c.leaves(with_state), kScanInputNames,
                                       1e-12, 1e-11);
      }
  // Channel tiles: N 16 gives tiles of 64 channels (150 = 64 + 64 + 22); N 300 tiles of 3 (5 = 3 + 2), where a
  // tile's items outnumber a block's threads.
  for (const auto& [D, N] : std::vector<std::pair<int64_t, int64_t>>{{150, 16}, {5, 300}}) {
    INFO("D " << D << " N " << N);
    const auto c = scan_inputs(2, 37, D, N);
    require_same_outputs_and_grads(recurrent_scan(), kernel_scan(16), c.leaves(true), kScanInputNames, 1e-12, 1e-11);
  }
}

TEST_CASE("mamba selective-scan kernel (host grid): decays that underflow, evaluation without autograd",
          "[cuda-kernel][mamba]") {
  torch::manual_seed(12);
  auto c = scan_inputs(1, 40, 3, 2);
  c.dt = c.dt * 25.0;  // Δ A down to −400 a step: states forgotten, nothing overflows
  require_same_outputs_and_grads(recurrent_scan(), kernel_scan(16), c.leaves(true), kScanInputNames, 1e-12, 1e-11);

  const auto ref = selective_scan_recurrent(c.x, c.dt, c.A, c.B, c.C, c.s0);
  {
    const torch::NoGradGuard no_grad;  // the forward pass alone, without checkpoints
    const MambaKernelHostScope on_host(true);
    const int64_t before = mamba_kernel_passes();
    auto r = selective_scan_kernel(c.x, c.dt, c.A, c.B, c.C, c.s0, 16);
    CHECK(mamba_kernel_passes() - before == 1);
    CHECK(max_rel_err(r.o, ref.o) <= 1e-12);
    CHECK(max_rel_err(r.final_state, ref.final_state) <= 1e-12);
  }

  // Out of its scope the CPU does not take the kernel.
  CHECK_FALSE(selective_scan_kernel_eligible(c.x));
}

TEST_CASE("mamba selective-scan kernel (host grid) on packed sequences == each sequence on its own (fp64: outputs, "
          "every gradient)",
          "[cuda-kernel][mamba][packed]") {
  torch::manual_seed(15);
  // Sequences of 1 to 40 tokens over chunks of 8 (one shorter than a chunk, one ending on a chunk boundary, one of
  // several chunks), an empty one, and 150 channels at N 16: three tiles.
  const std::vector<int64_t> bounds = {0, 1, 17, 17, 57, 61, 69};
  const auto c = scan_inputs(1, bounds.back(), 150, 16);
  const auto cu = torch::tensor(std::vector<int32_t>(bounds.begin(), bounds.end()), torch::kInt32);
  const KernelFn packed = [&](const std::vector<torch::Tensor>& in) {
    const int64_t before = mamba_kernel_passes();
    auto y = selective_scan_kernel_packed(in[0], in[1], in[2], in[3], in[4], cu, 8);
    CHECK(mamba_kernel_passes() - before == 1);
    return std::vector<torch::Tensor>{y};
  };
  const KernelFn one_by_one = [&](const std::vector<torch::Tensor>& in) {
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
      const int64_t start = bounds[i], len = bounds[i + 1] - start;
      if (len == 0) continue;
      auto piece = [&](const torch::Tensor& t) { return t.narrow(1, start, len); };
      parts.push_back(selective_scan_recurrent(piece(in[0]), piece(in[1]), in[2], piece(in[3]), piece(in[4])).o);
    }
    return std::vector<torch::Tensor>{torch::cat(parts, 1)};
  };
  require_same_outputs_and_grads(one_by_one, packed, c.leaves(false), kScanInputNames, 1e-12, 1e-11);
  // Bounds that do not cover the tokens are refused.
  CHECK_THROWS_WITH(selective_scan_kernel_packed(c.x, c.dt, c.A, c.B, c.C, cu.narrow(0, 0, 4), 8),
                    Catch::Contains("cu_seqlens must start at 0 and end at T = 69"));
}

TEST_CASE("mamba selective-scan kernel (host grid) in fp32: within the fp32 tolerance of the fp64 truth",
          "[cuda-kernel][mamba]") {
  torch::manual_seed(13);
  const auto c = scan_inputs(2, 200, 48, 16);
  require_fp32_close(recurrent_scan(), kernel_scan(64), c.leaves(true), kScanInputNames, 1e-4);
}

TEST_CASE("mamba layer through the selective-scan kernel (host grid) == through the fused CPU scan",
          "[cuda-kernel][mamba]") {
  auto mixer = make_mixer("mamba", 32, 1, {{"chunk_size", 8}}, 17);
  auto x = randn_f64({2, 30, 32}).requires_grad_(true);
  auto y_ref = mixer->forward(x, nullptr);
  auto w = torch::randn_like(y_ref);
  auto g_ref = torch::autograd::grad({(y_ref * w).sum()}, {x})[0];
  const MambaKernelHostScope on_host(true);
  const int64_t before = mamba_kernel_passes();
  auto y = mixer->forward(x, nullptr);
  auto g = torch::autograd::grad({(y * w).sum()}, {x})[0];
  CHECK(mamba_kernel_passes() - before == 2);
  CHECK(max_rel_err(y, y_ref) <= 1e-12);
  CHECK(max_rel_err(g, g_ref) <= 1e-11);
}

TEST_CASE("mamba selective-scan kernel on a CUDA device == its host run and the token-by-token scan",
          "[.cuda-kernels_mamba]") {
  REQUIRE(torch::cuda::is_available());
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(14);
  // A Mamba layer's shapes at d_model 128 (d_inner 256, N 16, chunks of 64 over 512 steps) and a ragged small one.
  for (const auto& [T, D, N] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{512, 256, 16}, {45, 150, 5}}) {
    INFO("T " << T << " D " << D << " N " << N);
    const auto c = scan_inputs(2, T, D, N);
    for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
      INFO("dtype " << dtype);
      ScanInputs cast = c;
      for (auto* t : {&cast.x, &cast.dt, &cast.A, &cast.B, &cast.C, &cast.s0}) *t = t->to(dtype);
      const auto on_host = outputs_and_grads(kernel_scan(64), cast, true);
      ScanInputs dev = cast;
      for (auto* t : {&dev.x, &dev.dt, &dev.A, &dev.B, &dev.C, &dev.s0}) *t = t->to(cuda);
      const int64_t before = mamba_kernel_passes();
      const auto on_device = outputs_and_grads(
          [](const std::vector<torch::Tensor>& in) {  // CUDA tensors take the kernel
            auto r = selective_scan_kernel(in[0], in[1], in[2], in[3], in[4], in[5], 64);
            return std::vector<torch::Tensor>{r.o, r.final_state};
          },
          dev, true);
      CHECK(mamba_kernel_passes() - before == 2);
      const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
      REQUIRE(on_device.size() == on_host.size());
      for (size_t i = 0; i < on_device.size(); ++i) {
        INFO("tensor " << i);
        CHECK(max_rel_err(on_device[i].to(torch::kFloat64), on_host[i].to(torch::kFloat64), 1e-6) <= tol);
      }
    }
    require_same_outputs_and_grads(recurrent_scan(), kernel_scan(64), c.leaves(true), kScanInputNames, 1e-12, 1e-11);
  }
  // Packed documents on the device == the host run.
  {
    const std::vector<int32_t> bounds = {0, 3, 70, 70, 200, 329};
    const auto c = scan_inputs(1, bounds.back(), 256, 16);
    const auto cu = torch::tensor(bounds, torch::kInt32);
    const auto packed_on = [&](const torch::Device& device) {
      ScanInputs on = c;
      for (auto* t : {&on.x, &on.dt, &on.A, &on.B, &on.C}) *t = t->to(device);
      return outputs_and_grads(
          [&](const std::vector<torch::Tensor>& in) {
            return std::vector<torch::Tensor>{
                selective_scan_kernel_packed(in[0], in[1], in[2], in[3], in[4], cu.to(device), 64)};
          },
          on, false);
    };
    const auto on_host = packed_on(torch::Device(torch::kCPU)), on_device = packed_on(cuda);
    for (size_t i = 0; i < on_device.size(); ++i) {
      INFO("packed tensor " << i);
      CHECK(max_rel_err(on_device[i], on_host[i], 1e-6) <= 1e-12);
    }
  }
  // The layer on the GPU takes the kernel (a forward and a backward pass) and equals its recurrent form.
  const int64_t before = mamba_kernel_passes();
  require_chunk_equals_recurrent_on(cuda, "mamba", 1, {{"chunk_size", 16}});
  CHECK(mamba_kernel_passes() - before == 2);
}
