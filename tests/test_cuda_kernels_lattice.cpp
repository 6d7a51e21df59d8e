// The Lattice scan kernel (runtime/lattice/scan_kernel.cuh), the whole recurrence in one pass each way:
//   [cuda-kernel][lattice]      its block code over the host grid (LatticeKernelHostScope) against the chunk form in
//                               fp64 (outputs, final state and anchor, the gradient of q, k, v, γ, μ and of the
//                               incoming state and anchor) for DEC and DOT, chunk sizes 4 and 3, a state arriving
//                               mid-chunk, a partial last chunk and more chunks than one checkpoint segment; in fp32
//                               against the fp64 truth;
//   [.cuda-kernels_lattice]     on a CUDA device: the CUDA kernel against the host run and the chunk form
//                               (CTest cuda.kernels_lattice, skipped without a GPU).
#include <catch2/catch.hpp>

#include "runtime/lattice/lattice.h"
#include "tests/test_util.h"

using namespace mnemo;

// Helpers in a named namespace: unity builds compile this file with other test files.
namespace lattice_kernel_tests {

using mnemo::test::max_rel_err;
using torch::Tensor;

struct ScanShape {
  int64_t B, T, H, m, d, C, pos;
};

struct ScanCase {
  std::vector<Tensor> leaves;  // q k v gamma mu S S0
  LatticeState st;
};

const char* const kScanLeafNames[] = {"q", "k", "v", "gamma", "mu", "S", "S0"};

// fp64 draws cast to `dtype`: slots with orthonormal rows (the learnable initial state's init), gates in (0, 1).
ScanCase scan_case(const ScanShape& s, torch::ScalarType dtype, const torch::Device& device, uint64_t seed) {
  torch::manual_seed(seed);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  auto slots = [&] {
    auto S = torch::randn({s.B, s.H, s.m, s.d}, f64);
    return S / S.norm(2, -1, true) * (0.5 + torch::rand({s.B, s.H, s.m, 1}, f64));
  };
  std::vector<Tensor> raw = {torch::randn({s.B, s.T, s.H, s.m}, f64) * 0.5,
                             torch::randn({s.B, s.T, s.H, s.m}, f64) * 0.5,
                             torch::randn({s.B, s.T, s.H, s.d}, f64),
                             torch::sigmoid(torch::randn({s.B, s.T, s.H}, f64)),
                             torch::sigmoid(torch::randn({s.B, s.T, s.H}, f64) + 2.0),
                             slots(),
                             slots()};
  ScanCase c;
  for (const auto& t : raw) c.leaves.push_back(t.to(device, dtype).requires_grad_());
  c.st.S = c.leaves[5];
  c.st.S0 = c.leaves[6];
  c.st.pos = s.pos;
  return c;
}

struct ScanRun {
  Tensor y;
  std::vector<Tensor> state, grads;  // S, S0; the gradient of every leaf (undefined where unused)
  int64_t pos = 0;
};

ScanRun run_scan(const ScanCase& c, int64_t C, bool dec) {
  const auto& x = c.leaves;
  auto r = lattice_chunk(x[0], x[1], x[2], x[3], x[4], c.st, C, dec);
  torch::manual_seed(99);
  auto weights = [](const Tensor& like) {
    return torch::randn(like.sizes(), torch::kFloat64).to(like.device(), like.scalar_type());
  };
  ScanRun run;
  run.y = r.y.detach();
  run.pos = r.state.pos;
  auto loss = (r.y * weights(r.y)).sum();
  for (const auto& s : {r.state.S, r.state.S0}) {
    loss = loss + (s * weights(s)).sum();
    run.state.push_back(s.detach());
  }
  run.grads = torch::autograd::grad({loss}, x, {}, false, false, /*allow_unused=*/true);
  return run;
}

ScanRun chunk_form(const ScanCase& c, int64_t C, bool dec) {
  const LatticeKernelHostScope kernel(false);
  return run_scan(c, C, dec);
}

ScanRun kernel_on_host(const ScanCase& c, int64_t C, bool dec) {
  const LatticeKernelHostScope kernel(true);
  const int64_t before = lattice_kernel_passes();
  auto r = run_scan(c, C, dec);
  CHECK(lattice_kernel_passes() - before == 2);  // the kernel ran: one forward, one backward pass
  return r;
}

// got against ref; a leaf without a gradient on one side (S0 when the state starts a chunk) must be zero or absent
// on the other.
void check_scan_close(const ScanRun& got, const ScanRun& ref, double out_tol, double grad_tol, double floor = 1e-30) {
  CHECK(got.pos == ref.pos);
  CHECK(max_rel_err(got.y.cpu(), ref.y.cpu()) <= out_tol);
  for (size_t l = 0; l < 2; ++l) CHECK(max_rel_err(got.state[l].cpu(), ref.state[l].cpu()) <= out_tol);
  REQUIRE(got.grads.size() == ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    CAPTURE(kScanLeafNames[i]);
    const auto &a = got.grads[i], &b = ref.grads[i];
    if (!a.defined() || !b.defined()) {
      const auto& present = a.defined() ? a : b;
      if (present.defined()) CHECK(present.abs().max().item<double>() == 0.0);
      continue;
    }
    CHECK(max_rel_err(a.cpu(), b.cpu(), floor) <= grad_tol);
  }
}

}  // namespace lattice_kernel_tests

using namespace lattice_kernel_tests;

TEST_CASE("lattice scan kernel (host grid) == the chunk form in fp64: outputs, state, every gradient",
          "[cuda-kernel][lattice]") {
  const torch::Device cpu(torch::kCPU);
  // T 75 with C 4: 19 chunks, more than one checkpoint segment (16 chunks), the last one partial; m 5 ≠ d 4.
  for (const ScanShape& s : {ScanShape{2, 75, 2, 5, 4, 4, 0}, ScanShape{1, 23, 3, 4, 6, 3, 2},
                             ScanShape{2, 9, 1, 3, 3, 4, 3}})
    for (bool dec : {true, false}) {
      CAPTURE(s.T, s.C, s.pos, dec);
      auto c = scan_case(s, torch::kFloat64, cpu, 7 + s.T + dec);
      const auto ref = chunk_form(c, s.C, dec);
      check_scan_close(kernel_on_host(c, s.C, dec), ref, 1e-12, 1e-10);
      // Without autograd (evaluation) the forward pass alone.
      const torch::NoGradGuard no_grad;
      const LatticeKernelHostScope kernel(true);
      const int64_t before = lattice_kernel_passes();
      auto r = lattice_chunk(c.leaves[0], c.leaves[1], c.leaves[2], c.leaves[3], c.leaves[4], c.st, s.C, dec);
      CHECK(lattice_kernel_passes() - before == 1);
      CHECK(max_rel_err(r.y, ref.y) <= 1e-12);
      CHECK(max_rel_err(r.state.S, ref.state[0]) <= 1e-12);
    }
}

TEST_CASE("lattice scan kernel (host grid) in fp32: within the fp32 tolerance of the fp64 truth",
          "[cuda-kernel][lattice]") {
  const torch::Device cpu(torch::kCPU);
  const ScanShape s{2, 64, 2, 16, 16, 4, 0};
  for (bool dec : {true, false}) {
    CAPTURE(dec);
    auto truth = chunk_form(scan_case(s, torch::kFloat64, cpu, 21), s.C, dec);
    auto c32 = scan_case(s, torch::kFloat32, cpu, 21);
    auto kernel = kernel_on_host(c32, s.C, dec);
    auto chunked = chunk_form(c32, s.C, dec);
    CHECK(kernel.y.scalar_type() == torch::kFloat32);
    // Outputs within 1e-5 of the fp64 result, gradients 1e-4, and no further from it than the chunk form in fp32
    // (within a factor of 4).
    check_scan_close(kernel, truth, 1e-5, 1e-4, 1e-6);
    CHECK(max_rel_err(kernel.y, truth.y) <= 4 * max_rel_err(chunked.y, truth.y) + 1e-7);
    for (size_t i = 0; i < truth.grads.size(); ++i)
      if (truth.grads[i].defined() && kernel.grads[i].defined() && chunked.grads[i].defined()) {
        CAPTURE(kScanLeafNames[i]);
        CHECK(max_rel_err(kernel.grads[i], truth.grads[i], 1e-6) <=
              4 * max_rel_err(chunked.grads[i], truth.grads[i], 1e-6) + 1e-6);
      }
  }
}

TEST_CASE("lattice scan kernel: out of its scope the CPU runs the chunk form", "[cuda-kernel][lattice]") {
  auto c = scan_case(ScanShape{1, 6, 1, 2, 2, 4, 0}, torch::kFloat64, torch::Device(torch::kCPU), 3);
  const int64_t before = lattice_kernel_passes();
  run_scan(c, 4, true);
  CHECK(lattice_kernel_passes() == before);
}

TEST_CASE("lattice scan kernel on a CUDA device == its host run and the chunk form", "[.cuda-kernels_lattice]") {
  REQUIRE(torch::cuda::is_available());
  at::globalContext().setAllowTF32CuBLAS(false);
  const torch::Device cpu(torch::kCPU), cuda(torch::kCUDA);
  // A Lattice layer's shapes (m = d = 64, C = 4, 512 tokens: 8 checkpoint segments) and a small one mid-chunk.
  for (const ScanShape& s : {ScanShape{2, 512, 4, 64, 64, 4, 0}, ScanShape{2, 37, 2, 16, 32, 3, 1}})
    for (bool dec : {true, false}) {
      CAPTURE(s.T, s.m, dec);
      auto on_host = kernel_on_host(scan_case(s, torch::kFloat32, cpu, 8), s.C, dec);
      auto dev = scan_case(s, torch::kFloat32, cuda, 8);
      const int64_t before = lattice_kernel_passes();
      auto on_device = run_scan(dev, s.C, dec);  // CUDA tensors take the kernel
      CHECK(lattice_kernel_passes() - before == 2);
      check_scan_close(on_device, on_host, 1e-5, 1e-4, 1e-6);
      auto truth = chunk_form(scan_case(s, torch::kFloat64, cpu, 8), s.C, dec);
      check_scan_close(on_device, truth, 1e-5, 1e-4, 1e-6);
    }
}
