// The fused gated-linear-attention chunk kernel (runtime/gla/chunk_kernel.cuh): its block code run over a
// sequential host grid against the eager chunk forms and the token-by-token recurrences — GLA's key-wise gates,
// the scalar gates of simple GLA and RetNet, linear attention's none — in fp64 and fp32: outputs, final states and
// every gradient through autograd; chunks that do not divide T, K != V, several value tiles, strong decay, packed
// sequences (cu_seqlens). The hidden [cuda-gla_kernel] group compares the CUDA kernels with the host run and the
// eager form on a GPU.
#include "runtime/gla/gla.h"
#include "runtime/kernels/kernel_counts.h"
#include "runtime/linear_attn/linear_attn.h"
#include "runtime/retnet/retnet.h"
#include "tests/mixer_test_util.h"

using namespace mnemo;
using namespace mnemo::test;

namespace {

const std::vector<std::string> kNames = {"q", "k", "v", "gate", "initial_state"};

struct Case {
  torch::Tensor q, k, v, gk, g, s0;
};

Case make_case(int64_t T, int64_t B = 2, int64_t H = 2, int64_t K = 8, int64_t V = 12) {
  return {randn_f64({B, T, H, K}), randn_f64({B, T, H, K}), randn_f64({B, T, H, V}),
          torch::log_sigmoid(randn_f64({B, T, H, K}) + 2.0), torch::log_sigmoid(randn_f64({B, T, H}) + 2.0),
          randn_f64({B, H, K, V})};
}

torch::Tensor opt(const std::vector<torch::Tensor>& in, size_t i) { return in.size() > i ? in[i] : torch::Tensor(); }

KernelFn fused_fn(GlaGate gate, int64_t C, GlaFusedTiling tiling, const torch::Tensor& cu_seqlens = {}) {
  return [=](const std::vector<torch::Tensor>& in) {
    // inputs: q, k, v, [gate], [s0] (linear attention: q, k, v, [s0])
    const bool gated = gate != GlaGate::kNone;
    auto r = gla_chunk_fused(in[0], in[1], in[2], gated ? in[3] : torch::Tensor(), gate, 0.3,
                             opt(in, gated ? 4 : 3), C, cu_seqlens, tiling);
    return std::vector<torch::Tensor>{r.o, r.final_state};
  };
}

KernelFn gla_ref(bool chunked) {
  return [=](const std::vector<torch::Tensor>& in) {
    auto r = chunked ? gla_chunk(in[0], in[1], in[2], in[3], 0.3, opt(in, 4), 16, 4)
                     : gla_recurrent(in[0], in[1], in[2], in[3], 0.3, opt(in, 4));
    return std::vector<torch::Tensor>{r.o, r.final_state};
  };
}

KernelFn simple_gla_ref(bool chunked) {
  return [=](const std::vector<torch::Tensor>& in) {
    auto r = chunked ? simple_gla_chunk(in[0], in[1], in[2], in[3], 0.3, opt(in, 4), 16)
                     : simple_gla_recurrent(in[0], in[1], in[2], in[3], 0.3, opt(in, 4));
    return std::vector<torch::Tensor>{r.o, r.final_state};
  };
}

KernelFn linear_attn_ref(bool chunked) {
  return [=](const std::vector<torch::Tensor>& in) {
    auto r = chunked ? linear_attn_chunk(in[0], in[1], in[2], 0.3, opt(in, 3), 16)
                     : linear_attn_recurrent(in[0], in[1], in[2], 0.3, opt(in, 3));
    return std::vector<torch::Tensor>{r.o, r.final_state};
  };
}

void require_fp32_close(const KernelFn& ref, const KernelFn& fn, const std::vector<torch::Tensor>& inputs,
                        double tol) {
  mnemo::test::require_fp32_close(ref, fn, inputs, kNames, tol);
}

// The fused kernel on inputs x = {q, k, v, s0[, gate]} with 16-wide tiles (every stage on tensor cores for bf16
// q, k, v), then outputs and the gradients of a fixed random loss w.r.t. every input: {o, final state, dq, dk, dv,
// ds0[, dgate]}.
std::vector<torch::Tensor> fused_outputs_and_grads(GlaGate gate, int64_t chunk, const std::vector<torch::Tensor>& x) {
  const bool gated = gate != GlaGate::kNone;
  auto r = gla_chunk_fused(x[0], x[1], x[2], gated ? x[4] : torch::Tensor(), gate, 0.3, x[3], chunk, {},
                           GlaFusedTiling{16, 16});
  torch::manual_seed(5);
  auto loss = (r.o.to(torch::kFloat64) * torch::randn(r.o.sizes(), torch::kFloat64)).sum() +
              (r.final_state.to(torch::kFloat64) * torch::randn(r.final_state.sizes(), torch::kFloat64)).sum();
  std::vector<torch::Tensor> out = {r.o.detach(), r.final_state.detach()};
  for (auto& g : torch::autograd::grad({loss}, x)) out.push_back(g);
  return out;
}

}  // namespace

TEST_CASE("gla fused kernel (host run) == gla recurrence and chunk form in fp64, every gradient",
          "[cuda-kernel][gla]") {
  torch::manual_seed(11);
  for (int64_t T : {1, 37, 100}) {
    for (auto [C, sub] : std::vector<std::pair<int64_t, int64_t>>{{16, 4}, {32, 16}, {64, 16}}) {
      for (int64_t tile_v : {0, 5}) {
        for (bool with_state : {false, true}) {
          INFO("T " << T << " C " << C << " sub " << sub << " tile_v " << tile_v << " state " << with_state);
          auto c = make_case(T);
          std::vector<torch::Tensor> inputs = {c.q, c.k, c.v, c.gk};
          if (with_state) inputs.push_back(c.s0);
          const auto fused = fused_fn(GlaGate::kKeyWise, C, {sub, tile_v});
          require_same_outputs_and_grads(gla_ref(false), fused, inputs, kNames);
          require_same_outputs_and_grads(gla_ref(true), fused, inputs, kNames);
        }
      }
    }
  }
}

TEST_CASE("gla fused kernel (host run) stays exact under strong key-wise decay, fp64 and fp32",
          "[cuda-kernel][gla]") {
  // Log-decays down to -30 per step and -40 on key channel 0: in-chunk cumulative gates reach about -2000, so
  // exp(-B) alone overflows even in fp64; the kernel only exponentiates differences <= 0.
  torch::manual_seed(12);
  auto c = make_case(70, 1, 2, 8, 6);
  auto gk = -30.0 * torch::rand_like(c.gk);
  gk.select(-1, 0).fill_(-40.0);
  gk.narrow(-1, 1, 3).mul_(0.01);  // moderate channels carry information across chunks
  const std::vector<torch::Tensor> inputs = {c.q, c.k, c.v, gk, c.s0};
  const auto fused = fused_fn(GlaGate::kKeyWise, 32, {8, 4});
  require_same_outputs_and_grads(gla_ref(false), fused, inputs, kNames);
  auto r = gla_chunk_fused(c.q.to(torch::kFloat32), c.k.to(torch::kFloat32), c.v.to(torch::kFloat32),
                           gk.to(torch::kFloat32), GlaGate::kKeyWise, 0.3, c.s0.to(torch::kFloat32), 32);
  CHECK(torch::isfinite(r.o).all().item<bool>());
  CHECK(torch::isfinite(r.final_state).all().item<bool>());
  require_fp32_close(gla_ref(false), fused, inputs, 1e-3);
}

TEST_CASE("gla fused kernel (host run) in fp32 and bf16 against the fp64 recurrence", "[cuda-kernel][gla]") {
  torch::manual_seed(13);
  auto c = make_case(77, 2, 2, 16, 8);
  const std::vector<torch::Tensor> inputs = {c.q, c.k, c.v, c.gk, c.s0};
  require_fp32_close(gla_ref(false), fused_fn(GlaGate::kKeyWise, 32, {16, 3}), inputs, 1e-3);
  // bf16 q, k, v (fp32 state and gates): the error of rounding the inputs, not of the kernel.
  auto bf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  auto r = gla_chunk_fused(bf(c.q), bf(c.k), bf(c.v), c.gk.to(torch::kFloat32), GlaGate::kKeyWise, 0.3,
                           c.s0.to(torch::kFloat32), 32);
  auto ref = gla_recurrent(bf(c.q).to(torch::kFloat64), bf(c.k).to(torch::kFloat64), bf(c.v).to(torch::kFloat64),
                           c.gk, 0.3, c.s0);
  CHECK(r.o.scalar_type() == torch::kBFloat16);
  CHECK(r.final_state.scalar_type() == torch::kFloat32);
  CHECK(max_rel_err(r.o.to(torch::kFloat64), ref.o) <= 1e-2);  // bf16 output rounding (2^-8)
  // The state stage runs on tensor cores: K ⊙ F enters its product rounded to bf16 (2^-9).
  CHECK(max_rel_err(r.final_state.to(torch::kFloat64), ref.final_state) <= 5e-3);
}

TEST_CASE("gla fused kernel (host run): bf16 on tensor cores, every gate, against the fp64 truth",
          "[cuda-kernel][gla]") {
  // K = 40 and value tiles of 16 + 8 columns pad to the 16-wide tiles; T = 77 in chunks of 32 or 64 ends in a
  // partial chunk (with 64, key-wise gates take three rows of 16-row sub-blocks below the diagonal on tensor cores,
  // forward and backward); the gradient stage takes K in slabs of 32 + 8 (padded to 16).
  torch::manual_seed(16);
  auto c = make_case(77, 2, 2, 40, 24);
  auto bf16_leaf = [](const torch::Tensor& t) { return t.detach().to(torch::kBFloat16).requires_grad_(); };
  auto f32_leaf = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat32).requires_grad_(); };
  // Every stage on tensor cores, for every gate.
  for (const auto& [gate, chunk] : std::vector<std::pair<GlaGate, int64_t>>{
           {GlaGate::kScalar, 32}, {GlaGate::kNone, 32}, {GlaGate::kKeyWise, 32}, {GlaGate::kKeyWise, 64}}) {
    CAPTURE(static_cast<int>(gate), chunk);
    const bool gated = gate != GlaGate::kNone;
    std::vector<torch::Tensor> in = {bf16_leaf(c.q), bf16_leaf(c.k), bf16_leaf(c.v), f32_leaf(c.s0)};
    if (gated) in.push_back(f32_leaf(gate == GlaGate::kScalar ? c.g : c.gk));
    std::vector<torch::Tensor> rounded;
    for (const auto& t : in) rounded.push_back(t.detach().to(torch::kFloat64).requires_grad_());
    // The truth: the scalar stages in fp64 (equal to the recurrences above) on the same rounded inputs.
    const auto got = fused_outputs_and_grads(gate, chunk, in), truth = fused_outputs_and_grads(gate, chunk, rounded);
    CHECK(got[0].scalar_type() == torch::kBFloat16);
    const std::vector<std::string> names = {"o", "final state", "dq", "dk", "dv", "ds0", "dg"};
    std::string ratios;
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(names[i]);
      const double e = error_ratio(got[i], truth[i]);
      CHECK(e <= (i < 2 ? 5e-3 : 1e-2));
      ratios += " " + names[i] + " " + std::to_string(e);
    }
    WARN("gla bf16 on tensor cores, "
         << (gate == GlaGate::kScalar ? "scalar gate" : gate == GlaGate::kNone ? "no gate" : "key-wise gates")
         << ", chunk " << chunk << ": error ratios" << ratios);
  }
}

TEST_CASE("gla fused kernel (host run) with HGRN2's gates (log sigmoid, no normaliser, k = 1 - g): fp64 every "
          "gradient, fp32, and bf16 on tensor cores against the fp64 truth", "[cuda-kernel][gla][hgrn2]") {
  // HGRN2 feeds GLA's kernels log g = log σ(f) with no normaliser (GLA divides by 16) and keys 1 − g: per-step
  // log-decays to about −5 here and in-chunk spans of hundreds over chunks of 64.
  torch::manual_seed(17);
  auto c = make_case(150, 2, 2, 16, 16);
  auto f = 2.0 * randn_f64({2, 150, 2, 16});
  auto log_g = torch::log_sigmoid(f), k = 1 - torch::sigmoid(f);
  const std::vector<torch::Tensor> inputs = {torch::silu(c.q), k, c.v, log_g, c.s0};
  const auto fused = fused_fn(GlaGate::kKeyWise, 64, {16, 0});
  require_same_outputs_and_grads(gla_ref(false), fused, inputs, kNames);
  require_fp32_close(gla_ref(false), fused, inputs, 1e-3);
  // bf16 q, k, v on the tensor-core stages (fp32 gates and state) against fp64 on the same rounded inputs.
  std::vector<torch::Tensor> in, rounded;
  for (const auto& t : {inputs[0], inputs[1], inputs[2], inputs[4], inputs[3]}) {  // q, k, v, s0, gate
    in.push_back(t.detach().to(in.size() < 3 ? torch::kBFloat16 : torch::kFloat32).requires_grad_());
    rounded.push_back(in.back().detach().to(torch::kFloat64).requires_grad_());
  }
  const auto got = fused_outputs_and_grads(GlaGate::kKeyWise, 64, in),
             truth = fused_outputs_and_grads(GlaGate::kKeyWise, 64, rounded);
  const std::vector<std::string> names = {"o", "final state", "dq", "dk", "dv", "ds0", "dg"};
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(names[i]);
    CHECK(torch::isfinite(got[i]).all().item<bool>());
    CHECK(error_ratio(got[i], truth[i]) <= (i < 2 ? 5e-3 : 1e-2));
  }
}

TEST_CASE("gla fused kernel (host run) with a scalar gate == simple GLA and RetNet forms, fp64 and fp32",
          "[cuda-kernel][gla]") {
  torch::manual_seed(14);
  for (int64_t T : {9, 50}) {
    INFO("T " << T);
    auto c = make_case(T, 2, 3, 8, 12);
    const std::vector<torch::Tensor> inputs = {c.q, c.k, c.v, c.g, c.s0};
    const auto fused = fused_fn(GlaGate::kScalar, 16, {4, 5});
    require_same_outputs_and_grads(simple_gla_ref(false), fused, inputs, kNames);
    require_same_outputs_and_grads(simple_gla_ref(true), fused, inputs, kNames);
    require_fp32_close(simple_gla_ref(false), fused, inputs, 1e-3);
    // RetNet: g_t = ln(1 - 2^(-5-h)) for every token.
    auto g = retnet_log_decay(3, c.q.options()).view({1, 1, 3}).expand({2, T, 3}).contiguous();
    auto r = gla_chunk_fused(c.q, c.k, c.v, g, GlaGate::kScalar, 0.3, c.s0, 16);
    auto ref = retention_chunk(c.q, c.k, c.v, 0.3, c.s0, 16);
    CHECK(max_rel_err(r.o, ref.o) <= 1e-10);
    CHECK(max_rel_err(r.final_state, ref.final_state) <= 1e-10);
  }
}

TEST_CASE("gla fused kernel (host run) without a gate == linear attention forms, fp64 and fp32",
          "[cuda-kernel][gla]") {
  torch::manual_seed(15);
  auto c = make_case(45, 2, 2, 8, 12);
  const std::vector<std::string> names = {"q", "k", "v", "initial_state"};
  const std::vector<torch::Tensor> inputs = {c.q, c.k, c.v, c.s0};
  const auto fused = fused_fn(GlaGate::kNone, 16, {8, 7});
  require_same_outputs_and_grads(linear_attn_ref(false), fused, inputs, names);
  require_same_outputs_and_grads(linear_attn_ref(true), fused, inputs, names);
  require_fp32_close(linear_attn_ref(false), fused, inputs, 1e-3);
}

TEST_CASE("gla fused kernel (host run) over packed sequences (cu_seqlens) == each sequence alone",
          "[cuda-kernel][gla]") {
  torch::manual_seed(16);
  const std::vector<int64_t> lengths = {5, 40, 19};  // 1, 3 and 2 chunks of 16 (the last ones partial)
  const int64_t T = 64, H = 2, K = 8, V = 6;
  auto cu = torch::tensor({0, 5, 45, 64}, torch::kInt32);
  for (GlaGate gate : {GlaGate::kKeyWise, GlaGate::kScalar}) {
    INFO("gate " << static_cast<int>(gate));
    auto c = make_case(T, 1, H, K, V);
    auto s0 = randn_f64({3, H, K, V});
    const bool keywise = gate == GlaGate::kKeyWise;
    const std::vector<torch::Tensor> inputs = {c.q, c.k, c.v, keywise ? c.gk : c.g, s0};
    // Reference: each sequence through its own recurrence, outputs concatenated, final states stacked.
    KernelFn per_sequence = [&](const std::vector<torch::Tensor>& in) {
      std::vector<torch::Tensor> outs, finals;
      int64_t start = 0;
      for (size_t n = 0; n < lengths.size(); ++n) {
        auto part = [&](const torch::Tensor& t) { return t.narrow(1, start, lengths[n]); };
        auto s = in[4].narrow(0, n, 1);
        auto r = keywise ? gla_recurrent(part(in[0]), part(in[1]), part(in[2]), part(in[3]), 0.3, s)
                         : simple_gla_recurrent(part(in[0]), part(in[1]), part(in[2]), part(in[3]), 0.3, s);
        outs.push_back(r.o);
        finals.push_back(r.final_state);
        start += lengths[n];
      }
      return std::vector<torch::Tensor>{torch::cat(outs, 1), torch::cat(finals, 0)};
    };
    require_same_outputs_and_grads(per_sequence, fused_fn(gate, 16, {4, 4}, cu), inputs, kNames);
  }
}

TEST_CASE("gla fused kernel: inputs it cannot take end in one clear error", "[cuda-kernel][gla]") {
  auto c = make_case(8, 2, 2, 4, 4);
  CHECK_THROWS_WITH(gla_chunk_fused(c.q, c.k, c.v, c.gk, GlaGate::kScalar, 0.3),
                    Catch::Contains("gla_chunk_fused") && Catch::Contains("g"));
  CHECK_THROWS_WITH(gla_chunk_fused(c.q, c.k, c.v, c.gk, GlaGate::kKeyWise, 0.3, {}, 4,
                                    torch::tensor({0, 8}, torch::kInt32)),
                    Catch::Contains("B = 1"));
  auto one = make_case(8, 1, 2, 4, 4);
  CHECK_THROWS_WITH(gla_chunk_fused(one.q, one.k, one.v, one.gk, GlaGate::kKeyWise, 0.3, {}, 4,
                                    torch::tensor({0, 3, 7}, torch::kInt32)),
                    Catch::Contains("end at T = 8"));
  CHECK_THROWS_WITH(gla_chunk_fused(c.q.to(torch::kInt64), c.k.to(torch::kInt64), c.v.to(torch::kInt64), c.gk,
                                    GlaGate::kKeyWise, 0.3),
                    Catch::Contains("float32, float64 or bfloat16"));
}

// ---- on a GPU (hidden group, run by ctest -R '^cuda\.' with --require-cuda) ----

TEST_CASE("cuda: gla fused kernel on the device == host run == eager chunk form, every gradient",
          "[.cuda-gla_kernel]") {
  REQUIRE(torch::cuda::is_available());
  REQUIRE(gla_fused_kernel_available(torch::zeros({1}, torch::kCUDA)));
  torch::manual_seed(21);
  const torch::Device cuda(torch::kCUDA);
  for (GlaGate gate : {GlaGate::kKeyWise, GlaGate::kScalar, GlaGate::kNone}) {
    for (int64_t K : {16, 64, 128}) {
      INFO("gate " << static_cast<int>(gate) << " K " << K);
      auto c = make_case(150, 2, 2, K, 2 * K);
      const bool gated = gate != GlaGate::kNone;
      auto gt = gate == GlaGate::kKeyWise ? c.gk : c.g;
      std::vector<torch::Tensor> inputs = {c.q, c.k, c.v};
      if (gated) inputs.push_back(gt);
      inputs.push_back(c.s0);
      KernelFn eager = gate == GlaGate::kKeyWise ? gla_ref(true)
                       : gate == GlaGate::kScalar ? simple_gla_ref(true) : linear_attn_ref(true);
      const auto host = fused_fn(gate, 64, {16, 0});
      KernelFn device = [&](const std::vector<torch::Tensor>& in) {
        std::vector<torch::Tensor> on_gpu;
        for (const auto& t : in) on_gpu.push_back(t.to(cuda));
        auto out = fused_fn(gate, 64, {16, 0})(on_gpu);
        for (auto& t : out) t = t.to(torch::kCPU);
        return out;
      };
      // fp64 on the device (its own tiling) == host run == eager, to rounding.
      const std::vector<std::string> names = gated ? kNames : std::vector<std::string>{"q", "k", "v", "initial_state"};
      require_same_outputs_and_grads(host, device, inputs, names);
      require_same_outputs_and_grads(eager, device, inputs, names);
      // fp32 on the device against the fp64 eager form.
      require_fp32_close(eager, device, inputs, 2e-3);
      // bf16 q, k, v on the device == the host run of the same bf16 inputs (same rounding points).
      auto bf = [&](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
      auto g32 = gated ? gt.to(torch::kFloat32) : torch::Tensor();
      auto r_host = gla_chunk_fused(bf(c.q), bf(c.k), bf(c.v), g32, gate, 0.3, c.s0.to(torch::kFloat32), 64);
      auto r_dev = gla_chunk_fused(bf(c.q).to(cuda), bf(c.k).to(cuda), bf(c.v).to(cuda),
                                   gated ? g32.to(cuda) : torch::Tensor(), gate, 0.3,
                                   c.s0.to(torch::kFloat32).to(cuda), 64);
      CHECK(max_rel_err(r_dev.o.cpu().to(torch::kFloat64), r_host.o.to(torch::kFloat64)) <= 2e-2);
      // (The state stage runs on tensor cores: another summation order, then bf16 operands of later products.)
      CHECK(max_rel_err(r_dev.final_state.cpu().to(torch::kFloat64), r_host.final_state.to(torch::kFloat64)) <= 2e-3);
    }
  }
}

TEST_CASE("cuda: gla fused kernel over packed sequences on the device == host run", "[.cuda-gla_kernel]") {
  REQUIRE(torch::cuda::is_available());
  torch::manual_seed(22);
  const torch::Device cuda(torch::kCUDA);
  auto c = make_case(300, 1, 4, 64, 64);
  auto s0 = randn_f64({3, 4, 64, 64});
  auto cu = torch::tensor({0, 1, 180, 300}, torch::kInt32);
  const std::vector<torch::Tensor> inputs = {c.q, c.k, c.v, c.gk, s0};
  KernelFn device = [&](const std::vector<torch::Tensor>& in) {
    std::vector<torch::Tensor> on_gpu;
    for (const auto& t : in) on_gpu.push_back(t.to(cuda));
    auto out = fused_fn(GlaGate::kKeyWise, 64, {16, 0}, cu.to(cuda))(on_gpu);
    for (auto& t : out) t = t.to(torch::kCPU);
    return out;
  };
  require_same_outputs_and_grads(fused_fn(GlaGate::kKeyWise, 64, {16, 0}, cu), device, inputs, kNames);
}

TEST_CASE("cuda: gla, retnet, linear attention, hgrn2, mamba3 and gsa mixers on the fused kernel == their "
          "recurrent form",
          "[.cuda-gla_kernel]") {
  REQUIRE(torch::cuda::is_available());
  const torch::Device cuda(torch::kCUDA);
  for (const std::string family : {"gla", "retnet", "linear_attn", "linear_attn_elu", "hgrn2", "mamba3", "gsa"}) {
    INFO(family);
    reset_kernel_pass_counts();
    require_chunk_equals_recurrent_on(cuda, family, 2, {{"chunk_size", 16}});
    // The layer took the CUDA kernels, forward and backward.
    const auto counts = kernel_pass_counts();
    INFO(describe_kernel_pass_counts());
    CHECK(counts.count("gla forward (cuda, fp64 products)") == 1);
    CHECK(counts.count("gla backward (cuda, fp64 products)") == 1);
  }
}
