// The layer kernels (runtime/kernels/fused_layers.cuh: RMSNorm, the SwiGLU gate, RoPE): their block code run over
// the sequential host grid against the eager formulas of runtime/layers.cpp in fp64, fp32 and bf16 — outputs and
// every gradient through autograd, rows spread over several per block, strided RoPE inputs, second-order gradients.
// The hidden [cuda-kernels_layers] group compares the CUDA kernels with the host run and checks that the layers take
// them on a GPU.
#include "runtime/kernels/fused_layers.h"
#include "runtime/layers.h"
#include "tests/mixer_test_util.h"

using namespace mnemo;
using namespace mnemo::test;

namespace {

torch::Tensor rms_norm_eager(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  auto xf = x.to(x.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32);
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps) * w).to(x.scalar_type());
}

// cos, sin [T, D] (each half the same) of positions offset .. offset + T − 1, as apply_rope builds them.
std::pair<torch::Tensor, torch::Tensor> rope_tables_f64(int64_t T, int64_t D, int64_t offset, double theta = 10000.0) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto inv_freq = torch::pow(theta, -torch::arange(0, D / 2, opts) * 2.0 / static_cast<double>(D));
  auto ang = torch::outer(torch::arange(offset, offset + T, opts), inv_freq);
  return {torch::cat({ang.cos(), ang.cos()}, -1), torch::cat({ang.sin(), ang.sin()}, -1)};
}

torch::Tensor rope_eager(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t D = x.size(3), half = D / 2;
  auto rotated = torch::cat({-x.slice(-1, half, D), x.slice(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

}  // namespace

TEST_CASE("layer kernels on the host grid: RMSNorm equals the eager formula (outputs, dx, dw)",
          "[cuda-kernel][layers]") {
  torch::manual_seed(1);
  // 3000 rows: three rows per block (the launch rule gives about 1024 blocks), so a block's dw sums several rows.
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 5, 24}, {3000, 40}, {1, 1, 7}}) {
    INFO("shape [" << shape.front() << ", ..., " << shape.back() << "]");
    auto x = randn_f64(shape), w = randn_f64({shape.back()}) * 0.5 + 1.0;
    auto eager = [](const std::vector<torch::Tensor>& in) {
      return std::vector<torch::Tensor>{rms_norm_eager(in[0], in[1], 1e-6)};
    };
    auto kernel = [](const std::vector<torch::Tensor>& in) {
      return std::vector<torch::Tensor>{rms_norm_fused_kernel(in[0], in[1], 1e-6)};
    };
    require_same_outputs_and_grads(eager, kernel, {x, w}, {"x", "weight"}, 1e-14, 1e-12);
    require_same_outputs_and_grads(eager, kernel, {x.to(torch::kFloat32), w.to(torch::kFloat32)}, {"x", "weight"},
                                   2e-6, 2e-5);
  }
  // The layer's own function on the CPU (its fused CPU kernel) agrees as well.
  auto x = randn_f64({4, 9, 32}), w = randn_f64({32});
  CHECK(max_rel_err(rms_norm_fused_kernel(x, w, 1e-5), rms_norm(x, w, 1e-5)) <= 1e-14);
}

TEST_CASE("layer kernels on the host grid: the SwiGLU gate equals silu(g) u (outputs and both gradients)",
          "[cuda-kernel][layers]") {
  torch::manual_seed(2);
  // 5000 elements: three blocks of 2048, the last one partial.
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 7, 13}, {50, 100}}) {
    auto g = randn_f64(shape) * 2.0, u = randn_f64(shape);
    auto eager = [](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{torch::silu(in[0]) * in[1]}; };
    auto kernel = [](const std::vector<torch::Tensor>& in) {
      return std::vector<torch::Tensor>{swiglu_gate_fused_kernel(in[0], in[1])};
    };
    require_same_outputs_and_grads(eager, kernel, {g, u}, {"g", "u"}, 1e-14, 1e-13);
    require_same_outputs_and_grads(eager, kernel, {g.to(torch::kFloat32), u.to(torch::kFloat32)}, {"g", "u"}, 1e-6,
                                   1e-6);
  }
}

TEST_CASE("layer kernels on the host grid: RoPE equals the rotate-half formula, strided inputs and the backward",
          "[cuda-kernel][layers]") {
  torch::manual_seed(3);
  const int64_t B = 2, T = 37, H = 3, D = 16;
  auto [cos, sin] = rope_tables_f64(T, D, 5);
  // q as attention produces it: [B, T, H, D] memory seen as [B, H, T, D].
  auto x = randn_f64({B, T, H, D}).transpose(1, 2);
  auto eager = [&](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{rope_eager(in[0], cos, sin)}; };
  auto kernel = [&](const std::vector<torch::Tensor>& in) {
    return std::vector<torch::Tensor>{rope_fused_kernel(in[0], cos, sin)};
  };
  require_same_outputs_and_grads(eager, kernel, {x}, {"x"}, 1e-15, 1e-15);
  // The output keeps the input's layout (the transposes after it stay views).
  auto y = rope_fused_kernel(x, cos, sin);
  CHECK(y.strides() == x.strides());
  // fp32 with fp32 tables, as apply_rope hands them on a GPU.
  auto c32 = cos.to(torch::kFloat32), s32 = sin.to(torch::kFloat32);
  CHECK(max_rel_err(rope_fused_kernel(x.to(torch::kFloat32), c32, s32), rope_eager(x, cos, sin)) <= 1e-6);
  // The layer's own function on the CPU: the same values.
  CHECK(max_rel_err(rope_fused_kernel(x, cos, sin), apply_rope(x, 5)) <= 1e-14);
  CHECK_THROWS_WITH(rope_fused_kernel(x, c32, s32), Catch::Contains("cos and sin"));
}

TEST_CASE("layer kernels on the host grid: bf16 elements with fp32 arithmetic stay within bf16 rounding",
          "[cuda-kernel][layers]") {
  torch::manual_seed(4);
  auto x = randn_f64({64, 48}), w = randn_f64({48}) * 0.3 + 1.0;
  auto xb = x.to(torch::kBFloat16), wb = w.to(torch::kBFloat16);
  // Against the fp64 formula of the bf16-rounded inputs: the only error left is the output's rounding (2^-8).
  CHECK(max_rel_err(rms_norm_fused_kernel(xb, wb, 1e-6), rms_norm_eager(xb.to(torch::kFloat64), wb.to(torch::kFloat64),
                                                                        1e-6)) <= 8e-3);
  auto g = randn_f64({64, 48}).to(torch::kBFloat16), u = randn_f64({64, 48}).to(torch::kBFloat16);
  CHECK(max_rel_err(swiglu_gate_fused_kernel(g, u), torch::silu(g.to(torch::kFloat64)) * u.to(torch::kFloat64)) <= 8e-3);
  auto [cos, sin] = rope_tables_f64(10, 8, 0);
  auto q = randn_f64({1, 2, 10, 8}).to(torch::kBFloat16);
  CHECK(max_rel_err(rope_fused_kernel(q, cos.to(torch::kFloat32), sin.to(torch::kFloat32)),
                    rope_eager(q.to(torch::kFloat64), cos, sin)) <= 8e-3);
  // Gradients in bf16 against the fp64 ones of the same rounded inputs.
  auto gl = g.clone().requires_grad_(true), ul = u.clone().requires_grad_(true);
  swiglu_gate_fused_kernel(gl, ul).to(torch::kFloat64).sum().backward();
  auto g64 = g.to(torch::kFloat64).requires_grad_(true), u64 = u.to(torch::kFloat64).requires_grad_(true);
  (torch::silu(g64) * u64).sum().backward();
  CHECK(max_rel_err(gl.grad(), g64.grad()) <= 8e-3);
  CHECK(max_rel_err(ul.grad(), u64.grad()) <= 8e-3);
}

TEST_CASE("layer kernels: a backward under create_graph gives second-order gradients", "[cuda-kernel][layers]") {
  torch::manual_seed(5);
  auto x = randn_f64({3, 8}).requires_grad_(true), w = randn_f64({8}).requires_grad_(true);
  auto x2 = x.detach().clone().requires_grad_(true), w2 = w.detach().clone().requires_grad_(true);
  auto gk = torch::autograd::grad({rms_norm_fused_kernel(x, w, 1e-6).pow(3).sum()}, {x}, {}, true, true)[0];
  auto ge = torch::autograd::grad({rms_norm_eager(x2, w2, 1e-6).pow(3).sum()}, {x2}, {}, true, true)[0];
  CHECK(max_rel_err(gk, ge) <= 1e-12);
  auto hk = torch::autograd::grad({gk.sum()}, {w})[0], he = torch::autograd::grad({ge.sum()}, {w2})[0];
  CHECK(max_rel_err(hk, he) <= 1e-12);
}

TEST_CASE("layer kernels: bad shapes are refused naming the argument", "[cuda-kernel][layers]") {
  auto x = randn_f64({2, 4});
  CHECK_THROWS_WITH(rms_norm_fused_kernel(x, randn_f64({3}), 1e-6), Catch::Contains("weight"));
  CHECK_THROWS_WITH(swiglu_gate_fused_kernel(x, randn_f64({2, 3})), Catch::Contains("g and u"));
  CHECK_THROWS_WITH(rope_fused_kernel(randn_f64({1, 1, 2, 3}), randn_f64({2, 3}), randn_f64({2, 3})),
                    Catch::Contains("D even"));
  CHECK_THROWS_WITH(rms_norm_fused_kernel(x.to(torch::kInt64), torch::ones({4}, torch::kInt64), 1e-6),
                    Catch::Contains("float32, float64 or bfloat16"));
}

// ---- on a GPU (hidden group, run by ctest -R '^cuda\.' with --require-cuda) ----
namespace {
// A fresh leaf copy of t on dev, strides kept (t.to(kCPU) of a CPU tensor would be t itself, and the device run
// would then read the gradient of a non-leaf).
torch::Tensor leaf_on(const torch::Tensor& t, const torch::Device& dev) {
  return t.detach().to(dev, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
}
}  // namespace

TEST_CASE("layer kernels on the GPU: the CUDA kernels equal the host run and the layers take them",
          "[.cuda-kernels_layers]") {
  REQUIRE(torch::cuda::is_available());
  REQUIRE(fused_layers_kernel_available(torch::zeros({1}, torch::kCUDA)));
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(6);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat64}) {
    INFO("dtype " << c10::toString(dtype));
    const double tol = dtype == torch::kBFloat16 ? 8e-3 : dtype == torch::kFloat32 ? 1e-5 : 1e-13;
    auto acc = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    // RMSNorm, rows of the 340M model's width, forward and both gradients.
    auto x = randn_f64({4096, 1024}).to(dtype), w = (randn_f64({1024}) * 0.3 + 1.0).to(dtype);
    auto dy = randn_f64({4096, 1024}).to(dtype);
    auto run = [&](const torch::Device& dev) {
      auto xl = leaf_on(x, dev), wl = leaf_on(w, dev);
      auto y = rms_norm_fused_kernel(xl, wl, 1e-6);
      y.backward(dy.to(dev));
      return std::vector<torch::Tensor>{y.cpu(), xl.grad().cpu(), wl.grad().cpu()};
    };
    auto host = run(torch::kCPU), device = run(cuda);
    for (size_t i = 0; i < host.size(); ++i) CHECK(max_rel_err(device[i], host[i]) <= tol);
    // The SwiGLU gate.
    auto g = randn_f64({4096, 2816}).to(dtype), u = randn_f64({4096, 2816}).to(dtype);
    auto run_gate = [&](const torch::Device& dev) {
      auto gl = leaf_on(g, dev), ul = leaf_on(u, dev);
      auto h = swiglu_gate_fused_kernel(gl, ul);
      h.backward(g.to(dev));
      return std::vector<torch::Tensor>{h.cpu(), gl.grad().cpu(), ul.grad().cpu()};
    };
    auto gh = run_gate(torch::kCPU), gd = run_gate(cuda);
    for (size_t i = 0; i < gh.size(); ++i) CHECK(max_rel_err(gd[i], gh[i]) <= tol);
    // RoPE on a strided q.
    auto [cos, sin] = rope_tables_f64(512, 64, 3);
    auto q = randn_f64({2, 512, 16, 64}).transpose(1, 2).to(dtype);
    auto run_rope = [&](const torch::Device& dev) {
      auto ql = leaf_on(q, dev);
      auto y = rope_fused_kernel(ql, cos.to(acc).to(dev), sin.to(acc).to(dev));
      y.backward(q.to(dev));
      return std::vector<torch::Tensor>{y.cpu(), ql.grad().cpu()};
    };
    auto rh = run_rope(torch::kCPU), rd = run_rope(cuda);
    for (size_t i = 0; i < rh.size(); ++i) CHECK(max_rel_err(rd[i], rh[i]) <= tol);
  }
  // The layers take the kernels on CUDA, and with MNEMO_FUSED_CUDA's switch off they run the eager formulas: the
  // same values.
  auto x = randn_f64({8, 33, 256}).to(torch::kFloat32).to(cuda), w = torch::ones({256}, x.options());
  CHECK(fused_layers_eligible({x, w}));
  auto fused = rms_norm(x, w, 1e-6);
  set_fused_cuda_layers_enabled(false);
  CHECK(!fused_layers_eligible({x, w}));
  auto eager = rms_norm(x, w, 1e-6);
  auto q = randn_f64({2, 4, 33, 64}).to(torch::kFloat32).to(cuda);
  auto rope_eager_path = apply_rope(q, 7);
  set_fused_cuda_layers_enabled(true);
  CHECK(max_rel_err(fused, eager) <= 1e-5);
  CHECK(max_rel_err(apply_rope(q, 7), rope_eager_path) <= 1e-5);
}
