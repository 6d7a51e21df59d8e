// The deep-memory chunk kernel (runtime/deep_memory/chunk_kernel.cuh), one node call at a time:
//   [cuda-kernel][deep_memory]     its block code over the host grid (DeepMemoryKernelHostScope) against the node's
//                                  tensor form in fp64 (y, chunk-end weights and momentum, the gradient of every
//                                  input) for every branch (momentum, ℓ2 / dot loss, clip, a window N > n, widths
//                                  d ≠ f ≠ hid), and in fp32 against the fp64 truth;
//   [.cuda-kernels_deep_memory]    on a CUDA device: the CUDA kernel against the host run and the tensor form
//                                  (CTest cuda.kernels_deep_memory, skipped without a GPU).
// Titans and the Atlas GD family through the kernel: tests/test_fused_chunk.cpp.
#include <catch2/catch.hpp>

#include <sstream>

#include "runtime/deep_memory/fused_chunk.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/precision.h"
#include "tests/test_util.h"

using namespace mnemo;

// Helpers in a named namespace: unity builds compile this file with other test files.
namespace deep_memory_kernel_tests {

using mnemo::test::max_rel_err;
using torch::Tensor;

struct Shape {
  int64_t B, H, n, N, d, f, hid;
};

// The node's inputs as leaves (fp64 draws, cast to `dtype`), in FusedChunkInputs order.
struct NodeCase {
  std::vector<Tensor> leaves;  // q qf k kf v w0 w1 s0 s1 a0 a1 A D C ae de ce pe ee
  FusedChunkInputs in;
};

NodeCase node_case(const Shape& s, bool mom, torch::ScalarType dtype, const torch::Device& device, uint64_t seed) {
  torch::manual_seed(seed);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  auto nrm = [&](std::vector<int64_t> shape, double scale) { return scale * torch::randn(shape, f64); };
  auto unit = [&](std::vector<int64_t> shape, double lo, double hi) { return lo + (hi - lo) * torch::rand(shape, f64); };
  const int64_t B = s.B, H = s.H;
  std::vector<Tensor> raw = {
      nrm({B, H, s.n, s.d}, 0.5),    nrm({B, H, s.n, s.f}, 0.5),   nrm({B, H, s.N, s.d}, 0.5),
      nrm({B, H, s.N, s.f}, 0.5),    nrm({B, H, s.N, s.d}, 1.0),   nrm({B, H, s.hid, s.f}, 0.4),
      nrm({B, H, s.d, s.hid}, 0.4),  nrm({B, H, s.hid, s.f}, 0.05), nrm({B, H, s.d, s.hid}, 0.05),
      nrm({B, H, s.hid, s.f}, 0.4),  nrm({B, H, s.d, s.hid}, 0.4), unit({B, H, s.n}, 0.5, 1.0),
      unit({B, H, s.n}, -0.3, 0.3),  unit({B, H, s.n, s.N}, 0.0, 0.3), unit({B, H}, 0.8, 1.0),
      unit({B, H}, -0.2, 0.2),       unit({B, H, s.N}, 0.0, 0.3),  unit({B, H}, 0.5, 0.9),
      unit({B, H, s.N}, 0.0, 0.3)};
  NodeCase c;
  for (const auto& t : raw) c.leaves.push_back(t.to(device, dtype).requires_grad_());
  const auto& x = c.leaves;
  c.in.q = x[0], c.in.qf = x[1], c.in.k = x[2], c.in.kf = x[3], c.in.v = x[4];
  c.in.w = {x[5], x[6]};
  if (mom) c.in.s = {x[7], x[8]};
  c.in.anchor = {x[9], x[10]};
  c.in.A = x[11], c.in.C = x[13], c.in.a_end = x[14], c.in.c_end = x[16];
  if (mom) c.in.D = x[12], c.in.d_end = x[15], c.in.p_end = x[17], c.in.e_end = x[18];
  return c;
}

struct NodeRun {
  Tensor y;
  std::vector<Tensor> state;  // w0 w1 (s0 s1)
  std::vector<Tensor> grads;  // of every leaf (undefined where unused)
};

// One call of the node and the gradients of Σ y ⊙ r + Σ_l w_l ⊙ r_l (+ momentum), with the same r in every dtype.
NodeRun run_node(const NodeCase& c, bool l2, double clip) {
  auto out = fused_mlp_chunk(c.in, l2, clip);
  torch::manual_seed(99);
  auto weights = [](const Tensor& like) {
    return torch::randn(like.sizes(), torch::kFloat64).to(like.device(), like.scalar_type());
  };
  NodeRun r;
  r.y = out.y.detach();
  auto loss = (out.y * weights(out.y)).sum();
  std::vector<Tensor> ends = out.w;
  ends.insert(ends.end(), out.s.begin(), out.s.end());
  for (const auto& w : ends) {
    loss = loss + (w * weights(w)).sum();
    r.state.push_back(w.detach());
  }
  r.grads = torch::autograd::grad({loss}, c.leaves, {}, false, false, /*allow_unused=*/true);
  return r;
}

NodeRun tensor_form(const NodeCase& c, bool l2, double clip) {
  const FusedCpuScope cpu(false);
  const DeepMemoryKernelHostScope kernel(false);
  return run_node(c, l2, clip);
}

NodeRun kernel_on_host(const NodeCase& c, bool l2, double clip) {
  const FusedCpuScope cpu(false);
  const DeepMemoryKernelHostScope kernel(true);
  const int64_t before = deep_memory_kernel_passes();
  auto r = run_node(c, l2, clip);
  CHECK(deep_memory_kernel_passes() - before == 2);  // the kernel ran: one forward, one backward pass
  return r;
}

const char* const kLeafNames[] = {"q",  "qf", "k", "kf", "v", "w0", "w1", "s0", "s1", "a0",
                                  "a1", "A",  "D", "C",  "ae", "de", "ce", "pe", "ee"};

// got against ref: outputs and state within out_tol, every gradient within grad_tol (relative to the largest
// entry, at least `floor`).
void check_close(const NodeRun& got, const NodeRun& ref, double out_tol, double grad_tol, double floor = 1e-30) {
  CHECK(max_rel_err(got.y.cpu(), ref.y.cpu()) <= out_tol);
  REQUIRE(got.state.size() == ref.state.size());
  for (size_t l = 0; l < ref.state.size(); ++l) CHECK(max_rel_err(got.state[l].cpu(), ref.state[l].cpu()) <= out_tol);
  REQUIRE(got.grads.size() == ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    CAPTURE(kLeafNames[i]);
    REQUIRE(got.grads[i].defined() == ref.grads[i].defined());
    if (ref.grads[i].defined()) CHECK(max_rel_err(got.grads[i].cpu(), ref.grads[i].cpu(), floor) <= grad_tol);
  }
}

}  // namespace deep_memory_kernel_tests

using namespace deep_memory_kernel_tests;

TEST_CASE("deep-memory chunk kernel (host grid) == the node's tensor form in fp64: y, end state, every gradient",
          "[cuda-kernel][deep_memory]") {
  const torch::Device cpu(torch::kCPU);
  // Widths all different (d 4, f 5, hid 7) so that a transposed index cannot pass; N > n: a window of carried terms.
  for (const Shape& s : {Shape{2, 3, 3, 6, 4, 5, 7}, Shape{1, 2, 5, 5, 3, 3, 6}})
    for (bool mom : {false, true})
      for (bool l2 : {true, false})
        for (double clip : {0.0, 0.3}) {
          CAPTURE(s.n, s.N, mom, l2, clip);
          auto c = node_case(s, mom, torch::kFloat64, cpu, 5 + s.N + mom);
          check_close(kernel_on_host(c, l2, clip), tensor_form(c, l2, clip), 1e-12, 1e-10);
        }
}

TEST_CASE("deep-memory chunk kernel (host grid) in fp32: within the fp32 tolerance of the fp64 truth",
          "[cuda-kernel][deep_memory]") {
  const torch::Device cpu(torch::kCPU);
  const Shape s{2, 2, 16, 20, 16, 16, 64};
  for (bool mom : {false, true})
    for (double clip : {0.0, 0.3}) {
      CAPTURE(mom, clip);
      auto truth = tensor_form(node_case(s, mom, torch::kFloat64, cpu, 21), true, clip);
      auto c32 = node_case(s, mom, torch::kFloat32, cpu, 21);
      auto kernel = kernel_on_host(c32, true, clip);
      auto tensor = tensor_form(c32, true, clip);
      CHECK(kernel.y.scalar_type() == torch::kFloat32);
      // Outputs within 1e-5 of the fp64 result, gradients 1e-4, and no further from it than the tensor form in fp32
      // (within a factor of 4).
      check_close(kernel, truth, 1e-5, 1e-4, 1e-6);
      CHECK(max_rel_err(kernel.y, truth.y) <= 4 * max_rel_err(tensor.y, truth.y) + 1e-7);
      for (size_t i = 0; i < truth.grads.size(); ++i)
        if (truth.grads[i].defined()) {
          CAPTURE(kLeafNames[i]);
          CHECK(max_rel_err(kernel.grads[i], truth.grads[i], 1e-6) <=
                4 * max_rel_err(tensor.grads[i], truth.grads[i], 1e-6) + 1e-6);
        }
    }
}

TEST_CASE("deep-memory chunk kernel (host grid) with bf16 products: within bf16's error of the fp64 truth",
          "[cuda-kernel][deep_memory]") {
  // The products on tensor cores (bf16 operands, fp32 sums) as under a bf16 run on CUDA; the weights, momentum and
  // every elementwise step fp32. Widths that pad to the 16-wide tiles (d 24, f 40, hid 96) and a window N > n.
  const torch::Device cpu(torch::kCPU);
  const Shape s{2, 2, 32, 40, 24, 40, 96};
  for (bool mom : {false, true})
    for (double clip : {0.0, 0.3}) {
      CAPTURE(mom, clip);
      const auto truth = tensor_form(node_case(s, mom, torch::kFloat64, cpu, 31), true, clip);
      const auto c32 = node_case(s, mom, torch::kFloat32, cpu, 31);
      const auto fp32 = kernel_on_host(c32, true, clip);
      const auto bf16 = [&] {
        const Bf16ProductsScope products(true);
        return kernel_on_host(c32, true, clip);
      }();
      using mnemo::test::error_ratio;
      // The bf16 products ran: y's error is bf16's, not fp32's.
      CHECK(error_ratio(bf16.y, truth.y) > 100 * error_ratio(fp32.y, truth.y));
      // Error ratios seen: y ≤ 3.4e-3, end state ≤ 4.3e-3, gradients ≤ 1.3e-2 (w0 without the clip).
      std::ostringstream ratios;
      auto check_ratio = [&](const char* name, const Tensor& got, const Tensor& ref, double tol) {
        const double e = error_ratio(got, ref);
        CAPTURE(name);
        CHECK(e <= tol);
        ratios << " " << name << " " << e;
      };
      check_ratio("y", bf16.y, truth.y, 1e-2);
      for (size_t l = 0; l < truth.state.size(); ++l) check_ratio("state", bf16.state[l], truth.state[l], 1e-2);
      for (size_t i = 0; i < truth.grads.size(); ++i)
        if (truth.grads[i].defined()) check_ratio(kLeafNames[i], bf16.grads[i], truth.grads[i], 2e-2);
      WARN("deep-memory kernel, bf16 products, momentum " << mom << ", clip " << clip << ": error ratios"
                                                          << ratios.str());
    }
}

TEST_CASE("deep-memory chunk kernel: the backward takes the forward's bf16 products outside their scope",
          "[cuda-kernel][deep_memory]") {
  // torch.amp's pattern: the forward under autocast, the backward after it (and autograd may run it on another
  // thread, where the thread-local switch is off).
  const auto c = node_case(Shape{1, 2, 16, 16, 16, 16, 32}, true, torch::kFloat32, torch::Device(torch::kCPU), 41);
  const auto inside = [&] {
    const Bf16ProductsScope products(true);
    return kernel_on_host(c, true, 0.0);
  }();
  const FusedCpuScope cpu(false);
  const DeepMemoryKernelHostScope kernel(true);
  FusedChunkOutput out;
  {
    const Bf16ProductsScope products(true);
    out = fused_mlp_chunk(c.in, true, 0.0);
  }
  torch::manual_seed(99);
  auto weights = [](const Tensor& like) { return torch::randn(like.sizes(), torch::kFloat64).to(like.scalar_type()); };
  auto loss = (out.y * weights(out.y)).sum();
  for (const auto& w : {out.w[0], out.w[1], out.s[0], out.s[1]}) loss = loss + (w * weights(w)).sum();
  const auto grads = torch::autograd::grad({loss}, c.leaves, {}, false, false, /*allow_unused=*/true);
  CHECK(torch::equal(out.y, inside.y));
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i].defined()) {
      CAPTURE(kLeafNames[i]);
      CHECK(torch::equal(grads[i], inside.grads[i]));
    }
}

TEST_CASE("deep-memory chunk kernel: out of its scope the CPU runs the other forms", "[cuda-kernel][deep_memory]") {
  auto c = node_case(Shape{1, 1, 2, 2, 2, 2, 3}, true, torch::kFloat64, torch::Device(torch::kCPU), 3);
  const int64_t before = deep_memory_kernel_passes();
  for (bool cpu_form : {true, false}) {
    const FusedCpuScope scope(cpu_form);
    run_node(c, true, 0.0);
  }
  CHECK(deep_memory_kernel_passes() == before);
}

TEST_CASE("deep-memory chunk kernel on a CUDA device == its host run and the tensor form",
          "[.cuda-kernels_deep_memory]") {
  REQUIRE(torch::cuda::is_available());
  at::globalContext().setAllowTF32CuBLAS(false);
  const torch::Device cpu(torch::kCPU), cuda(torch::kCUDA);
  // A Titans layer's shapes (head dim 64, hidden 4·64, chunk 64) and a window (N > n).
  for (const Shape& s : {Shape{2, 4, 64, 64, 64, 64, 256}, Shape{2, 2, 16, 19, 32, 48, 64}})
    for (bool mom : {true, false})
      for (double clip : {0.0, 0.3}) {
        CAPTURE(s.n, s.N, mom, clip);
        auto on_host = kernel_on_host(node_case(s, mom, torch::kFloat32, cpu, 8), true, clip);
        auto dev = node_case(s, mom, torch::kFloat32, cuda, 8);
        const int64_t before = deep_memory_kernel_passes();
        auto on_device = run_node(dev, true, clip);  // CUDA tensors take the kernel
        CHECK(deep_memory_kernel_passes() - before == 2);
        check_close(on_device, on_host, 1e-5, 1e-4, 1e-6);
        auto truth = tensor_form(node_case(s, mom, torch::kFloat64, cpu, 8), true, clip);
        check_close(on_device, truth, 1e-5, 1e-4, 1e-6);
      }
  // bf16 products (as under a bf16 run): the device's tensor cores against the host run of the same roundings
  // (only the order of the fp32 sums differs) and against the fp64 truth.
  using mnemo::test::error_ratio;
  const Shape s{2, 4, 64, 64, 64, 64, 256};
  for (bool mom : {true, false}) {
    CAPTURE(mom);
    const Bf16ProductsScope products(true);
    auto on_host = kernel_on_host(node_case(s, mom, torch::kFloat32, cpu, 9), true, 0.3);
    auto on_device = run_node(node_case(s, mom, torch::kFloat32, cuda, 9), true, 0.3);
    auto truth = tensor_form(node_case(s, mom, torch::kFloat64, cpu, 9), true, 0.3);
    CHECK(error_ratio(on_device.y.cpu(), on_host.y) <= 2e-3);
    CHECK(error_ratio(on_device.y.cpu(), truth.y) <= 5e-3);
    for (size_t l = 0; l < truth.state.size(); ++l) {
      CHECK(error_ratio(on_device.state[l].cpu(), on_host.state[l]) <= 2e-3);
      CHECK(error_ratio(on_device.state[l].cpu(), truth.state[l]) <= 5e-3);
    }
    for (size_t i = 0; i < truth.grads.size(); ++i)
      if (truth.grads[i].defined()) {
        CAPTURE(kLeafNames[i]);
        CHECK(error_ratio(on_device.grads[i].cpu(), on_host.grads[i]) <= 5e-3);
        CHECK(error_ratio(on_device.grads[i].cpu(), truth.grads[i]) <= 1e-2);
      }
  }
}
