// The fused CPU kernels (runtime/kernels/fused_cpu.h) against the eager formulas they replace: forward and
// gradients (torch::autograd::grad) in fp64 (≤ 1e-12 relative) and fp32, on odd shapes — non-contiguous inputs,
// T = 1, D not a multiple of 8 — and the dispatch (which path rms_norm, SwiGLU, apply_rope, blocked_attention take).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "runtime/attention/attention.h"
#include "runtime/blocks/window_attention.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/gelu.h"
#include "runtime/layers.h"
#include "runtime/mixed_precision.h"
#include "runtime/model.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::max_rel_err;
using mnemo::test::max_rel_err_all;

namespace {

// Tolerances: fp64 agrees to rounding; fp32 to rounding of O(D) sums (and the fused exp, 1.2e-7 relative).
double tolerance(torch::ScalarType dtype) { return dtype == torch::kFloat64 ? 1e-12 : 2e-5; }

torch::Tensor randn(std::vector<int64_t> shape, torch::ScalarType dtype, bool requires_grad = true) {
  return torch::randn(shape, torch::TensorOptions().dtype(dtype)).requires_grad_(requires_grad);
}

// The autograd node's name says which path produced y.
bool made_by(const torch::Tensor& y, const std::string& fn) {
  return y.grad_fn() && y.grad_fn()->name().find(fn) != std::string::npos;
}

// Whether a node named like fn is anywhere in y's graph.
bool graph_has(const torch::Tensor& y, const std::string& fn) {
  std::vector<torch::autograd::Node*> todo = {y.grad_fn().get()};
  for (size_t i = 0; i < todo.size() && i < 1000; ++i) {
    if (!todo[i]) continue;
    if (todo[i]->name().find(fn) != std::string::npos) return true;
    for (const auto& e : todo[i]->next_edges()) todo.push_back(e.function.get());
  }
  return false;
}

// Forward and gradients (with respect to the inputs that require grad) of the fused and the reference function
// on the same inputs agree within tol, relative to max(max |reference|, 1e-3): a gradient that vanishes
// mathematically (T = 1: dq = dk = 0) is compared in absolute terms.
void check_same_function(const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& fused,
                         const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& reference,
                         const std::vector<torch::Tensor>& inputs, double tol) {
  auto y = fused(inputs), y_ref = reference(inputs);
  REQUIRE(y.sizes() == y_ref.sizes());
  CHECK(max_rel_err(y, y_ref, 1e-3) <= tol);
  std::vector<torch::Tensor> wrt;
  for (const auto& t : inputs)
    if (t.requires_grad()) wrt.push_back(t);
  REQUIRE(!wrt.empty());
  auto dy = torch::randn_like(y_ref);
  auto g = torch::autograd::grad({y}, wrt, {dy}, /*retain_graph=*/false, false, /*allow_unused=*/true);
  auto g_ref = torch::autograd::grad({y_ref}, wrt, {dy}, false, false, true);
  for (size_t i = 0; i < wrt.size(); ++i) {
    REQUIRE(g[i].defined() == g_ref[i].defined());
    INFO("gradient " << i << " of " << wrt.size());
    if (!g[i].defined()) continue;
    const double zero_tol = g[i].scalar_type() == torch::kFloat64 ? 1e-12 : 1e-6;
    if (g_ref[i].abs().max().item<double>() <= zero_tol) {
      // A gradient that vanishes identically (each query sees one key: dq = dk = 0): the fused backward forms it as
      // a difference of O(1) row terms that cancel, so in fp32 it is zero up to a few ulps of those terms (and so is
      // the reference on LibTorch 2.x, whose softmax backward leaves such ulps where 1.13 gives exact zeros).
      CHECK(g[i].abs().max().item<double>() <= zero_tol);
    } else {
      CHECK(max_rel_err(g[i], g_ref[i], 1e-3) <= tol);
    }
  }
}

const std::vector<torch::ScalarType> kDtypes = {torch::kFloat64, torch::kFloat32};

}  // namespace

TEST_CASE("fused gemm equals matmul, through the BLAS and through at::addmm_, for every transpose", "[fused]") {
  torch::manual_seed(0);
  INFO("BLAS symbol found in the process: " << fused_cpu::blas_found());
  const int64_t M = 7, N = 5, K = 9;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      // Row strides larger than the widths (a sub-matrix of a wider buffer), beta = 0.5 on an existing C.
      auto A = ta ? torch::randn({K, M + 3}, torch::kFloat64) : torch::randn({M, K + 3}, torch::kFloat64);
      auto B = tb ? torch::randn({N, K + 2}, torch::kFloat64) : torch::randn({K, N + 2}, torch::kFloat64);
      auto a = ta ? A.narrow(1, 0, M).t() : A.narrow(1, 0, K);
      auto b = tb ? B.narrow(1, 0, K).t() : B.narrow(1, 0, N);
      auto C0 = torch::randn({M, N + 4}, torch::kFloat64);
      auto expected = 0.5 * C0.narrow(1, 0, N) + 1.5 * torch::matmul(a, b);
      for (bool aten : {false, true}) {
        auto C = C0.clone();
        auto f = aten ? fused_cpu::gemm_aten<double> : fused_cpu::gemm<double>;
        f(ta, tb, M, N, K, 1.5, A.data_ptr<double>(), A.stride(0), B.data_ptr<double>(), B.stride(0), 0.5,
          C.data_ptr<double>(), C.stride(0));
        CHECK(max_rel_err(C.narrow(1, 0, N), expected) < 1e-13);
        CHECK(torch::equal(C.narrow(1, N, 4), C0.narrow(1, N, 4)));  // outside the columns: untouched
        // fp32 through the same path
        auto Af = A.to(torch::kFloat32), Bf = B.to(torch::kFloat32), Cf = C0.to(torch::kFloat32);
        auto ff = aten ? fused_cpu::gemm_aten<float> : fused_cpu::gemm<float>;
        ff(ta, tb, M, N, K, 1.5f, Af.data_ptr<float>(), Af.stride(0), Bf.data_ptr<float>(), Bf.stride(0), 0.5f,
           Cf.data_ptr<float>(), Cf.stride(0));
        CHECK(max_rel_err(Cf.narrow(1, 0, N), expected) < 1e-5);
      }
    }
  }
}

TEST_CASE("fused RMSNorm equals the eager formula: forward, dx, dw", "[fused]") {
  torch::manual_seed(1);
  for (auto dtype : kDtypes) {
    const double tol = tolerance(dtype);
    auto fused = [](const std::vector<torch::Tensor>& in) { return rms_norm(in[0], in[1], 1e-6); };
    auto reference = [](const std::vector<torch::Tensor>& in) { return rms_norm_reference(in[0], in[1], 1e-6); };
    for (std::vector<int64_t> shape : {std::vector<int64_t>{2, 5, 13}, {3, 1, 128}, {1, 1, 1}, {4, 37}, {2, 3, 70}}) {
      DYNAMIC_SECTION(c10::toString(dtype) << " " << c10::IntArrayRef(shape)) {
        auto x = randn(shape, dtype), w = (1 + 0.3 * torch::randn({shape.back()}, dtype)).requires_grad_(true);
        REQUIRE(made_by(rms_norm(x, w), "RMSNormFn"));
        check_same_function(fused, reference, {x, w}, tol);
      }
    }
    // Non-contiguous input (a transposed view) and weight (a strided slice).
    auto x = randn({6, 2, 11}, dtype).transpose(0, 1), w = randn({22}, dtype).slice(0, 0, 22, 2);
    REQUIRE(!x.is_contiguous());
    check_same_function(fused, reference, {x, w}, tol);
    // Gradient for x alone (a frozen weight) and for the weight alone.
    check_same_function(fused, reference, {x, w.detach()}, tol);
    check_same_function(fused, reference, {x.detach(), w}, tol);
  }
}

TEST_CASE("fused RMSNorm: second-order gradients equal the eager formula's", "[fused]") {
  torch::manual_seed(2);
  auto x = randn({3, 4, 9}, torch::kFloat64), w = randn({9}, torch::kFloat64);
  auto grad_norm = [&](bool fused) {
    auto y = fused ? rms_norm(x, w) : rms_norm_reference(x, w);
    auto g = torch::autograd::grad({(y * y.detach().sin()).sum()}, {x, w}, {}, true, /*create_graph=*/true);
    auto s = g[0].pow(2).sum() + g[1].pow(2).sum();
    return torch::autograd::grad({s}, {x, w});
  };
  CHECK(max_rel_err_all(grad_norm(true), grad_norm(false)) <= 1e-12);
}

TEST_CASE("fused RMSNorm is not used for bf16, under autocast, for a 2-D weight or when switched off", "[fused]") {
  auto x = randn({2, 3, 8}, torch::kFloat32), w = randn({8}, torch::kFloat32);
  CHECK(made_by(rms_norm(x, w), "RMSNormFn"));
  CHECK(!made_by(rms_norm(x.to(torch::kBFloat16), w), "RMSNormFn"));
  CHECK(!made_by(rms_norm(x.to(torch::kFloat64), w), "RMSNormFn"));  // mixed dtypes
  CHECK(!made_by(rms_norm(x.view({2, 3, 2, 4}), w.view({2, 4})), "RMSNormFn"));
  {
    const AutocastScope autocast(torch::Device(torch::kCPU), Precision::bf16);
    CHECK(!made_by(rms_norm(x, w), "RMSNormFn"));
  }
  {
    const FusedCpuScope off(false);
    CHECK(!made_by(rms_norm(x, w), "RMSNormFn"));
  }
  CHECK(made_by(rms_norm(x, w), "RMSNormFn"));
}

TEST_CASE("fused SwiGLU equals silu(gate x) * up x: forward and every gradient", "[fused]") {
  torch::manual_seed(3);
  for (auto dtype : kDtypes) {
    for (std::vector<int64_t> shape : {std::vector<int64_t>{2, 9, 12}, {1, 1, 12}, {3, 12}}) {
      DYNAMIC_SECTION(c10::toString(dtype) << " " << c10::IntArrayRef(shape)) {
        SwiGLU mlp(12, 20);  // hidden 20: not a multiple of 8
        mlp->to(dtype);
        auto x = randn(shape, dtype);
        std::vector<torch::Tensor> inputs = {x};
        for (auto& p : mlp->parameters()) inputs.push_back(p);
        REQUIRE(graph_has(mlp(x), "SwiGLUGateFn"));
        REQUIRE(!graph_has(mlp->forward_reference(x), "SwiGLUGateFn"));
        check_same_function([&](const std::vector<torch::Tensor>& in) { return mlp->forward(in[0]); },
                            [&](const std::vector<torch::Tensor>& in) { return mlp->forward_reference(in[0]); },
                            inputs, tolerance(dtype));
      }
    }
  }
}

TEST_CASE("fused SwiGLU gate equals the eager silu(g) * u on a non-contiguous input", "[fused]") {
  torch::manual_seed(4);
  for (auto dtype : kDtypes) {
    // Values far into both tails of the sigmoid too.
    auto gu = (torch::randn({10, 7, 3}, dtype) * 8).requires_grad_(true);
    auto view = gu.permute({1, 2, 0});  // [7, 3, 10]: last dim 2I = 10, I = 5
    REQUIRE(made_by(fused_swiglu_gate(view), "SwiGLUGateFn"));
    check_same_function([](const std::vector<torch::Tensor>& in) { return fused_swiglu_gate(in[0].permute({1, 2, 0})); },
                        [](const std::vector<torch::Tensor>& in) {
                          auto parts = in[0].permute({1, 2, 0}).chunk(2, -1);
                          return torch::silu(parts[0]) * parts[1];
                        },
                        {gu}, tolerance(dtype));
  }
}

TEST_CASE("gelu_values: one pass equals the eager GELU, GELU', φ and GELU'' (tails, non-contiguous input)", "[fused]") {
  torch::manual_seed(5);
  for (auto dtype : kDtypes) {
    auto h = (torch::randn({9, 13}, dtype) * 4).t();  // non-contiguous; values out to |h| ~ 15
    h.index_put_({0, 0}, 0.0), h.index_put_({1, 0}, -30.0), h.index_put_({2, 0}, 30.0);
    const double inv_sqrt2 = 0.70710678118654752440, inv_sqrt_2pi = 0.39894228040143267794;
    auto cdf = 0.5 * (1 + torch::erf(h * inv_sqrt2)), pdf = torch::exp(-0.5 * h * h) * inv_sqrt_2pi;
    auto g = gelu_values(h, /*with_second=*/true);
    // fp32's erf is Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7): absolute tolerance.
    const double tol = dtype == torch::kFloat64 ? 1e-14 : 3e-6;
    CHECK((g.value - h * cdf).abs().max().item<double>() <= tol);
    CHECK((g.grad - (cdf + h * pdf)).abs().max().item<double>() <= tol);
    CHECK((g.pdf - pdf).abs().max().item<double>() <= tol);
    CHECK((g.second - pdf * (2 - h * h)).abs().max().item<double>() <= tol);
    CHECK(torch::allclose(g.value, torch::gelu(h), 0, tol));
    CHECK_FALSE(gelu_values(h).second.defined());
    {  // switched off: the eager formulas, the same values
      FusedCpuScope off(false);
      auto e = gelu_values(h, true);
      CHECK((e.value - g.value).abs().max().item<double>() <= tol);
      CHECK((e.second - g.second).abs().max().item<double>() <= tol);
    }
  }
}

TEST_CASE("fused RoPE equals x cos + rotate_half(x) sin: offsets, T = 1, strided input, D = 6", "[fused]") {
  torch::manual_seed(5);
  for (auto dtype : kDtypes) {
    for (int64_t D : {6, 32}) {
      for (int64_t T : {1, 11}) {
        for (int64_t offset : {0, 5}) {
          DYNAMIC_SECTION(c10::toString(dtype) << " D " << D << " T " << T << " offset " << offset) {
            // [B, T, H, D] memory seen as [B, H, T, D] (the attention mixer's layout), and a contiguous one.
            auto base = randn({2, T, 3, D}, dtype);
            auto contiguous = randn({2, 3, T, D}, dtype);
            auto fused = [&](const std::vector<torch::Tensor>& in) { return apply_rope(in[0].transpose(1, 2), offset); };
            auto ref = [&](const std::vector<torch::Tensor>& in) {
              return apply_rope_reference(in[0].transpose(1, 2), offset);
            };
            REQUIRE(made_by(apply_rope(base.transpose(1, 2), offset), "RopeFn"));
            check_same_function(fused, ref, {base}, tolerance(dtype));
            check_same_function([&](const std::vector<torch::Tensor>& in) { return apply_rope(in[0], offset); },
                                [&](const std::vector<torch::Tensor>& in) { return apply_rope_reference(in[0], offset); },
                                {contiguous}, tolerance(dtype));
          }
        }
      }
    }
  }
}

namespace {
struct AttentionCase {
  std::string name;
  int64_t B, H, Tq, Tk, D, q_offset, k_offset, window;
};
}  // namespace

TEST_CASE("fused attention equals the eager blocked and naive attention: forward, dq, dk, dv", "[fused]") {
  torch::manual_seed(6);
  const std::vector<AttentionCase> cases = {
      {"causal, 3 query blocks", 2, 3, 150, 150, 8, 0, 0, 0},
      {"causal, D = 5", 1, 2, 37, 37, 5, 0, 0, 0},
      {"T = 1", 2, 2, 1, 1, 4, 0, 0, 0},
      {"one query over a cache (decode)", 2, 2, 1, 20, 8, 19, 0, 0},
      {"prefill after a cache", 1, 2, 70, 90, 6, 20, 0, 0},
      {"window 13", 1, 2, 150, 150, 8, 0, 0, 13},
      {"window 1", 1, 1, 20, 20, 3, 0, 0, 1},
      {"window over a ring buffer", 1, 2, 7, 12, 4, 30, 25, 8},
  };
  for (auto dtype : kDtypes) {
    for (const auto& c : cases) {
      DYNAMIC_SECTION(c10::toString(dtype) << " " << c.name) {
        REQUIRE(fused_attention_supported(c.Tq, c.Tk, c.q_offset, c.k_offset, c.window));
        // q as the mixer makes it (a transposed view of [B, T, H, D]), k contiguous, v a strided slice.
        auto q = randn({c.B, c.Tq, c.H, c.D}, dtype), k = randn({c.B, c.H, c.Tk, c.D}, dtype),
             v = randn({c.B, c.H, c.Tk, c.D + 3}, dtype);
        auto args = [&](const std::vector<torch::Tensor>& in) {
          return std::make_tuple(in[0].transpose(1, 2), in[1], in[2].narrow(3, 1, c.D));
        };
        auto fused = [&](const std::vector<torch::Tensor>& in) {
          auto [qq, kk, vv] = args(in);
          return blocked_attention(qq, kk, vv, c.q_offset, c.k_offset, c.window, 16);
        };
        auto eager = [&](const std::vector<torch::Tensor>& in) {
          auto [qq, kk, vv] = args(in);
          return blocked_attention_eager(qq, kk, vv, c.q_offset, c.k_offset, c.window, 16);
        };
        auto naive = [&](const std::vector<torch::Tensor>& in) {
          auto [qq, kk, vv] = args(in);
          return naive_attention(qq, kk, vv, c.q_offset, c.k_offset, c.window);
        };
        REQUIRE(made_by(fused({q, k, v}), "AttentionFn"));
        check_same_function(fused, eager, {q, k, v}, tolerance(dtype));
        check_same_function(fused, naive, {q, k, v}, tolerance(dtype));
        torch::NoGradGuard no_grad;  // the forward without saving probabilities (evaluation, decode)
        CHECK(max_rel_err(fused({q, k, v}), naive({q, k, v})) <= tolerance(dtype));
      }
    }
  }
}

TEST_CASE("fused attention is left out where a query sees no key, and its second-order gradients are right",
          "[fused]") {
  // Query 0 at position 0 with keys from position 1 on: the eager path's NaN row stays the eager path's.
  CHECK(!fused_attention_supported(4, 4, 0, 1, 0));
  CHECK(!fused_attention_supported(4, 4, 10, 0, 3));  // every key older than the window
  torch::manual_seed(7);
  auto q = randn({1, 2, 9, 4}, torch::kFloat64), k = randn({1, 2, 9, 4}, torch::kFloat64),
       v = randn({1, 2, 9, 4}, torch::kFloat64);
  auto grad_norm = [&](bool fused) {
    auto y = fused ? blocked_attention(q, k, v, 0, 0, 0, 4) : naive_attention(q, k, v, 0, 0, 0);
    auto g = torch::autograd::grad({(y * y.detach().cos()).sum()}, {q, k, v}, {}, true, /*create_graph=*/true);
    auto s = g[0].pow(2).sum() + g[1].pow(2).sum() + g[2].pow(2).sum();
    return torch::autograd::grad({s}, {q, k, v});
  };
  CHECK(max_rel_err_all(grad_norm(true), grad_norm(false)) <= 1e-12);
}

TEST_CASE("window_attention (the Titans/ATLAS hybrids) takes the fused kernel only where the visibility is the same",
          "[fused]") {
  struct Case {
    const char* name;
    std::vector<int64_t> qpos, kpos;
    int64_t window, always_before;
    bool fused;
  };
  auto range = [](int64_t a, int64_t b) {
    std::vector<int64_t> r;
    for (int64_t i = a; i < b; ++i) r.push_back(i);
    return r;
  };
  auto cat = [](std::vector<int64_t> a, const std::vector<int64_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<Case> cases = {
      {"MAG training: prefix 3, window covers every key", range(3, 40), range(0, 40), 64, 3, true},
      {"MAG training: prefix 3, binding window (general mask)", range(3, 40), range(0, 40), 8, 3, false},
      {"no prefix, binding window", range(0, 40), range(0, 40), 8, 0, true},
      {"decode over a window cache, prefix 2", range(2 + 30, 2 + 33), cat(range(0, 2), range(2 + 25, 2 + 33)), 8, 2,
       false},
      {"MAC: [P | h | S] with h and S at the same positions", range(2 + 5, 2 + 12),
       cat(range(0, 2), cat(range(2, 2 + 12), range(2, 2 + 12))), 0, 0, false},
  };
  torch::manual_seed(9);
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const int64_t Tq = c.qpos.size(), Tk = c.kpos.size();
      auto qpos = torch::tensor(c.qpos, torch::kInt64), kpos = torch::tensor(c.kpos, torch::kInt64);
      auto q = randn({2, 2, Tq, 6}, torch::kFloat64), k = randn({2, 2, Tk, 6}, torch::kFloat64),
           v = randn({2, 2, Tk, 6}, torch::kFloat64);
      auto run = [&](bool fused) {
        return [&, fused](const std::vector<torch::Tensor>& in) {
          const FusedCpuScope scope(fused);
          return window_attention(in[0], qpos, in[1], in[2], kpos, c.window, c.always_before, 16);
        };
      };
      CHECK(graph_has(run(true)({q, k, v}), "AttentionFn") == c.fused);
      check_same_function(run(true), run(false), {q, k, v}, 1e-12);
    }
  }
}

TEST_CASE("segment_attention (MAC) on the fused kernel with interleaved keys equals the explicit-position mask",
          "[fused]") {
  // Query i (segment position so + i) sees the persistent keys, and h_j, S_j for j <= so + i: the fused kernel
  // over [P | h_0 S_0 h_1 S_1 ...] (keys_per_step 2) against window_attention's general masked path.
  torch::manual_seed(10);
  for (auto dtype : kDtypes) {
    for (int64_t n_p : {0, 3}) {
      for (int64_t so : {0, 5}) {  // a fresh segment, and a call inside one (decoding / prefill after a prefix)
        CAPTURE(dtype, n_p, so);
        const int64_t n = 70, m = so + n;  // n > the kernel's 64-row query block
        auto q = randn({2, 2, n, 6}, dtype), hk = randn({2, 2, m, 6}, dtype), hv = randn({2, 2, m, 6}, dtype),
             xk = randn({2, 2, m, 6}, dtype), xv = randn({2, 2, m, 6}, dtype);
        auto pk = n_p ? randn({2, 2, n_p, 6}, dtype) : torch::Tensor(),
             pv = n_p ? randn({2, 2, n_p, 6}, dtype) : torch::Tensor();
        std::vector<torch::Tensor> in = {q, hk, hv, xk, xv};
        if (n_p) in.push_back(pk), in.push_back(pv);
        auto run = [&](bool fused) {
          return [&, fused](const std::vector<torch::Tensor>& x) {
            const FusedCpuScope scope(fused);
            return segment_attention(x[0], so, n_p ? x[5] : torch::Tensor(), n_p ? x[6] : torch::Tensor(), x[1],
                                     x[2], x[3], x[4], 16);
          };
        };
        CHECK(graph_has(run(true)(in), "AttentionFn"));
        CHECK_FALSE(graph_has(run(false)(in), "AttentionFn"));
        check_same_function(run(true), run(false), in, tolerance(dtype));
      }
    }
  }
}

TEST_CASE("fused kernels leave whole models unchanged: loss and every parameter gradient", "[fused]") {
  for (const std::string model : {"transformer", "linear_attn", "deltanet", "gated_deltanet", "mamba2", "titans_mag"}) {
    for (auto dtype : kDtypes) {
      DYNAMIC_SECTION(model << " " << c10::toString(dtype)) {
        json flat = {{"model", model}, {"vocab_size", 40}, {"d_model", 32}, {"n_layers", 2}, {"n_heads", 4}};
        torch::manual_seed(8);
        LanguageModel m(model_config_from_json(flat));
        m->to(dtype);
        auto ids = torch::randint(0, 40, {2, 70}, torch::kInt64);
        auto loss_and_grads = [&](bool fused) {
          const FusedCpuScope scope(fused);
          m->zero_grad();
          auto logits = m->forward(ids);
          auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 40}), ids.reshape({-1}));
          loss.backward();
          std::vector<torch::Tensor> out = {loss.detach().clone()};
          for (auto& p : m->parameters()) out.push_back(p.grad().clone());
          return out;
        };
        auto fused = loss_and_grads(true), eager = loss_and_grads(false);
        const double tol = dtype == torch::kFloat64 ? 1e-10 : 1e-4;
        CHECK(max_rel_err_all(fused, eager) <= tol);
        // Evaluation under InferenceMode (no autograd records): the same logits.
        auto logits = [&](bool fused) {
          const FusedCpuScope scope(fused);
          const c10::InferenceMode inference;
          return m->forward(ids).clone();
        };
        CHECK(max_rel_err(logits(true), logits(false)) <= tol);
      }
    }
  }
}
