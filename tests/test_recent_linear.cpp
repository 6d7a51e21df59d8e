// Kimi Delta Attention (docs/models.md#kda), Gated DeltaProduct (docs/models.md#gated-deltaproduct) and forgetting
// attention (docs/models.md#forgetting-transformer) kernels:
// chunked form == token-by-token form in fp64 (outputs, final state, every gradient), including decays past the
// factorisation limit and partial last chunks; the reductions to Gated DeltaNet (KDA with one decay for all key
// channels, DeltaProduct with one step per token); state passing across a split. The mixers' causality, decode ==
// forward and gradients are in the mixer contract (tests/test_mixer_contract.cpp), the flash-linear-attention
// fixtures in tests/test_kernel_fixtures.cpp.
#include <catch2/catch.hpp>

#include "runtime/delta_product/delta_product.h"
#include "runtime/delta_rule/delta_rule.h"
#include "runtime/forgetting_attn/forgetting_attn.h"
#include "runtime/kda/kda.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/layers.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace {

constexpr double kGradFloor = 1e-6;  // relative errors of gradients against a scale floored here

struct Inputs {
  torch::Tensor q, k, v, beta, g, h0;  // g / h0 undefined when not used
  std::vector<torch::Tensor> leaves() const {
    std::vector<torch::Tensor> out = {q, k, v, beta};
    if (g.defined()) out.push_back(g);
    if (h0.defined()) out.push_back(h0);
    return out;
  }
};

// q, k l2-normalised normals, beta = σ(N) (× 2: negative eigenvalues), g = logsigmoid(N + 2) · decay_scale.
// Keys, values and betas have `rows_per_token` rows per token; g is [B, T, H] or, with per_channel, [B, T, H, K].
Inputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, int64_t rows_per_token, bool gated,
                   bool per_channel, bool with_state, uint64_t seed, double decay_scale = 1.0) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t R = T * rows_per_token;
  Inputs in;
  in.q = l2norm(torch::randn({B, T, H, K}, o)).detach().requires_grad_();
  in.k = l2norm(torch::randn({B, R, H, K}, o)).detach().requires_grad_();
  in.v = torch::randn({B, R, H, V}, o).requires_grad_();
  in.beta = (2.0 * torch::sigmoid(torch::randn({B, R, H}, o))).detach().requires_grad_();
  if (gated) {
    auto shape = per_channel ? std::vector<int64_t>{B, T, H, K} : std::vector<int64_t>{B, T, H};
    in.g = (torch::log_sigmoid(torch::randn(shape, o) + 2.0) * decay_scale).detach().requires_grad_();
  }
  if (with_state) in.h0 = torch::randn({B, H, K, V}, o).requires_grad_();
  return in;
}

struct Run {
  torch::Tensor o, state;
  std::vector<torch::Tensor> grads;
};

// Outputs and the gradients of a fixed random linear functional of (o, final state) w.r.t. every input.
Run with_grads(const Inputs& in, const DeltaRuleResult& r) {
  torch::manual_seed(1234);
  auto wo = torch::randn(r.o.sizes(), r.o.options()), ws = torch::randn(r.final_state.sizes(), r.o.options());
  auto loss = (r.o * wo).sum() + (r.final_state * ws).sum();
  return {r.o.detach(), r.final_state.detach(), torch::autograd::grad({loss}, in.leaves())};
}

void check_same(const Run& got, const Run& ref) {
  CHECK(max_rel_err(got.o, ref.o) <= 1e-10);
  CHECK(max_rel_err(got.state, ref.state) <= 1e-10);
  REQUIRE(got.grads.size() == ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    CAPTURE(i);
    CHECK(max_rel_err(got.grads[i], ref.grads[i], kGradFloor) <= 1e-8);
  }
}

Run kda(const Inputs& in, int64_t chunk, int64_t sub_chunk = 16) {
  auto r = chunk == 0 ? kda_recurrent(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.3)
                      : kda_chunk(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.3, chunk, sub_chunk);
  return with_grads(in, {r.o, r.final_state});
}

// chunk 0: the token-by-token form; fused: the rows on the delta rule's fused kernels (host grid on CPU tensors).
Run delta_product(const Inputs& in, int64_t n, int64_t chunk, bool fused = false) {
  auto r = chunk == 0 ? gated_delta_product_recurrent(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.3, n)
           : fused    ? gated_delta_product_chunk_fused(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.3, n, chunk)
                      : gated_delta_product_chunk(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.3, n, chunk);
  return with_grads(in, r);
}

}  // namespace

TEST_CASE("kda: chunk form equals the recurrence in fp64 (outputs, final state, gradients)", "[recent_linear][kda]") {
  for (int64_t T : {1, 7, 63, 100}) {
    for (bool with_state : {false, true}) {
      auto in = make_inputs(2, T, 2, 8, 12, 1, true, true, with_state, 40 + T);
      auto ref = kda(in, 0);
      for (auto [C, sub] : std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {64, 16}, {7, 16}}) {
        CAPTURE(T, with_state, C, sub);
        check_same(kda(in, C, sub), ref);
      }
    }
  }
}

TEST_CASE("kda: strong per-channel decay (past the factorisation limit) stays exact and finite",
          "[recent_linear][kda]") {
  // log decays about −8 per step on average: a 64-row chunk spans ~500, where e^{−b} would overflow fp32 and
  // pass fp64's factorisation limit; the sub-chunk form keeps every exponent <= 0.
  auto in = make_inputs(2, 100, 2, 8, 12, 1, true, true, true, 51, 40.0);
  REQUIRE_FALSE(decay_factorisable(to_chunks(in.g.detach(), 64).cumsum(-2)));
  auto ref = kda(in, 0);
  for (int64_t sub : {16, 5}) {
    CAPTURE(sub);
    auto got = kda(in, 64, sub);
    check_same(got, ref);
    for (const auto& g : got.grads) CHECK(torch::isfinite(g).all().item<bool>());
  }
}

TEST_CASE("kda with the same decay on every key channel is Gated DeltaNet", "[recent_linear][kda]") {
  auto in = make_inputs(2, 37, 2, 8, 8, 1, true, false, true, 52);
  auto g_channels = in.g.detach().unsqueeze(-1).expand({2, 37, 2, 8}).contiguous();
  auto gdn = delta_rule_recurrent(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.3);
  for (int64_t C : {0, 16}) {
    CAPTURE(C);
    auto r = C == 0 ? kda_recurrent(in.q, in.k, in.v, in.beta, g_channels, in.h0, 0.3)
                    : kda_chunk(in.q, in.k, in.v, in.beta, g_channels, in.h0, 0.3, C);
    CHECK(max_rel_err(r.o, gdn.o) <= 1e-12);
    CHECK(max_rel_err(r.final_state, gdn.final_state) <= 1e-12);
  }
}

TEST_CASE("kda: one pass equals two halves with the state passed on", "[recent_linear][kda]") {
  auto in = make_inputs(1, 50, 2, 8, 8, 1, true, true, true, 53);
  auto whole = kda_chunk(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.3, 16);
  auto part = [&](const torch::Tensor& t, int64_t start, int64_t len) { return t.narrow(1, start, len); };
  auto first = kda_chunk(part(in.q, 0, 21), part(in.k, 0, 21), part(in.v, 0, 21), part(in.beta, 0, 21),
                         part(in.g, 0, 21), in.h0, 0.3, 16);
  auto second = kda_chunk(part(in.q, 21, 29), part(in.k, 21, 29), part(in.v, 21, 29), part(in.beta, 21, 29),
                          part(in.g, 21, 29), first.final_state, 0.3, 16);
  CHECK(max_rel_err(torch::cat({first.o, second.o}, 1), whole.o) <= 1e-12);
  CHECK(max_rel_err(second.final_state, whole.final_state) <= 1e-12);
}

TEST_CASE("kda: bad shapes are refused naming the tensor", "[recent_linear][kda]") {
  auto in = make_inputs(1, 5, 2, 8, 8, 1, true, true, false, 54);
  auto scalar_g = in.g.detach().select(-1, 0);
  CHECK_THROWS_WITH(kda_recurrent(in.q, in.k, in.v, in.beta, scalar_g, {}, 0.3), Catch::Contains("g"));
  CHECK_THROWS_WITH(kda_chunk(in.q, in.k, in.v, in.beta, in.g, {}, 0.3, 0), Catch::Contains("chunk_size"));
}

TEST_CASE("gated deltaproduct: chunked form, eager and on the delta rule's fused kernels (host grid), equals the "
          "recurrence in fp64 (outputs, final state, gradients)",
          "[recent_linear][deltaproduct]") {
  // fused: the route the mixer takes on a GPU, the block code the CUDA kernels run over the sequential host grid.
  for (int64_t n : {1, 2, 3}) {
    for (bool gated : {false, true}) {
      for (int64_t T : {1, 9, 45}) {
        auto in = make_inputs(2, T, 2, 8, 12, n, gated, false, T != 9, 60 + T + n);
        auto ref = delta_product(in, n, 0);
        for (int64_t C : {7, 16, 64}) {
          for (bool fused : {false, true}) {
            CAPTURE(n, gated, T, C, fused);
            check_same(delta_product(in, n, C, fused), ref);
          }
        }
      }
    }
  }
}

TEST_CASE("gated deltaproduct: packed documents on the fused kernels equal each document on its own",
          "[recent_linear][deltaproduct][packed]") {
  // Token bounds 0, 5, 5, 18, 40: an empty document, one within a chunk of rows, two across several.
  const std::vector<int64_t> bounds = {0, 5, 5, 18, 40};
  const int64_t n = 3, T = bounds.back();
  auto in = make_inputs(1, T, 2, 8, 6, n, true, false, false, 90);
  auto cu = torch::tensor(bounds, torch::kInt64);
  auto packed = gated_delta_product_chunk_fused(in.q, in.k, in.v, in.beta, in.g, {}, 0.3, n, 16, cu);
  REQUIRE(packed.final_state.sizes() == std::vector<int64_t>{4, 2, 8, 6});
  for (size_t d = 0; d + 1 < bounds.size(); ++d) {
    const int64_t t0 = bounds[d], L = bounds[d + 1] - t0;
    CAPTURE(d);
    if (L == 0) {
      CHECK(packed.final_state[static_cast<int64_t>(d)].abs().max().item<double>() == 0.0);
      continue;
    }
    auto rows = [&](const torch::Tensor& t) { return t.narrow(1, t0 * n, L * n); };
    auto alone = gated_delta_product_recurrent(in.q.narrow(1, t0, L), rows(in.k), rows(in.v), rows(in.beta),
                                               in.g.narrow(1, t0, L), {}, 0.3, n);
    CHECK(max_rel_err(packed.o.narrow(1, t0, L), alone.o) <= 1e-12);
    CHECK(max_rel_err(packed.final_state[static_cast<int64_t>(d)], alone.final_state[0]) <= 1e-12);
  }
}

TEST_CASE("gated deltaproduct with one step per token is Gated DeltaNet", "[recent_linear][deltaproduct]") {
  auto in = make_inputs(2, 30, 2, 8, 8, 1, true, false, true, 70);
  auto gdn = delta_rule_recurrent(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.3);
  auto dp = gated_delta_product_recurrent(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.3, 1);
  CHECK(max_rel_err(dp.o, gdn.o) <= 1e-13);
  CHECK(max_rel_err(dp.final_state, gdn.final_state) <= 1e-13);
}

TEST_CASE("gated deltaproduct: two steps per token are two delta-rule tokens read after the second",
          "[recent_linear][deltaproduct]") {
  // The definition spelled out on one token from a known state: S ← e^g S, then two delta steps, then q S.
  auto in = make_inputs(1, 1, 1, 4, 3, 2, true, false, true, 71);
  auto S = in.h0.detach() * in.g.detach().exp().view({1, 1, 1, 1});
  for (int64_t j = 0; j < 2; ++j) {
    auto k = in.k.detach().select(1, j).view({1, 1, 4, 1}), v = in.v.detach().select(1, j).view({1, 1, 1, 3});
    auto b = in.beta.detach().select(1, j).view({1, 1, 1, 1});
    S = S + k * (b * (v - (k * S).sum(-2, true)));
  }
  auto expect = 0.3 * torch::matmul(in.q.detach().view({1, 1, 1, 4}), S).view({1, 1, 1, 3});
  auto r = gated_delta_product_recurrent(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.3, 2);
  CHECK(max_rel_err(r.o, expect) <= 1e-13);
  CHECK(max_rel_err(r.final_state, S) <= 1e-13);
}

TEST_CASE("gated deltaproduct: keys for the wrong number of steps are refused naming the tensor",
          "[recent_linear][deltaproduct]") {
  auto in = make_inputs(1, 4, 2, 8, 8, 2, true, false, false, 72);
  CHECK_THROWS_WITH(gated_delta_product_recurrent(in.q, in.k, in.v, in.beta, in.g, {}, 0.3, 3), Catch::Contains("k"));
  CHECK_THROWS_WITH(gated_delta_product_chunk(in.q, in.k, in.v, in.beta, in.g, {}, 0.3, 0, 16),
                    Catch::Contains("num_householder"));
}

TEST_CASE("forgetting attention: parallel form equals the token-by-token form in fp64 (outputs, gradients)",
          "[recent_linear][fox]") {
  for (int64_t T : {1, 9, 40}) {
    torch::manual_seed(80 + T);
    auto o = torch::TensorOptions().dtype(torch::kFloat64);
    auto q = torch::randn({2, T, 2, 8}, o).requires_grad_(), k = torch::randn({2, T, 2, 8}, o).requires_grad_();
    auto v = torch::randn({2, T, 2, 6}, o).requires_grad_();
    auto g = torch::log_sigmoid(torch::randn({2, T, 2}, o) + 2.0).detach().requires_grad_();
    auto w = torch::randn({2, T, 2, 6}, o);
    auto ref = forgetting_attention_recurrent(q, k, v, g, 0.4);
    auto ref_grads = torch::autograd::grad({(ref * w).sum()}, {q, k, v, g});
    for (int64_t block : {1, 7, 64}) {
      CAPTURE(T, block);
      auto c = g.cumsum(1);
      auto got = forgetting_attention(q, k, v, c, c, 0.4, block);
      CHECK(max_rel_err(got, ref) <= 1e-12);
      auto grads = torch::autograd::grad({(got * w).sum()}, {q, k, v, g});
      for (size_t i = 0; i < grads.size(); ++i) {
        CAPTURE(i);
        CHECK(max_rel_err(grads[i], ref_grads[i], kGradFloor) <= 1e-10);
      }
    }
  }
}

TEST_CASE("forgetting attention on the fused CPU attention kernel equals the eager form (fp64, fp32, prefix keys)",
          "[recent_linear][fox][fused]") {
  // Scale 1/√d_h and value width d_h: the fused kernel's case, with the forget-gate term as its logit bias.
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    for (int64_t prefix : {0, 5}) {
      CAPTURE(dtype == torch::kFloat64, prefix);
      torch::manual_seed(95 + prefix);
      auto o = torch::TensorOptions().dtype(dtype);
      const int64_t T = 70, Tk = T + prefix, D = 8;
      auto q = torch::randn({2, T, 3, D}, o).requires_grad_();
      auto k = torch::randn({2, Tk, 3, D}, o).requires_grad_(), v = torch::randn({2, Tk, 3, D}, o).requires_grad_();
      auto c_k = torch::log_sigmoid(torch::randn({2, Tk, 3}, o) + 2.0).cumsum(1).detach().requires_grad_();
      auto c_q = c_k.detach().narrow(1, prefix, T).clone().requires_grad_();
      const double scale = 1.0 / std::sqrt(double(D));
      const std::vector<torch::Tensor> inputs = {q, k, v, c_q, c_k};
      auto w = torch::randn({2, T, 3, D}, o);
      auto fused = forgetting_attention(q, k, v, c_q, c_k, scale, 16);
      auto fused_grads = torch::autograd::grad({(fused * w).sum()}, inputs);
      torch::Tensor eager;
      std::vector<torch::Tensor> eager_grads;
      {
        FusedCpuScope off(false);
        eager = forgetting_attention(q, k, v, c_q, c_k, scale, 16);
        eager_grads = torch::autograd::grad({(eager * w).sum()}, inputs);
      }
      const double tol = dtype == torch::kFloat64 ? 1e-12 : 2e-5;
      CHECK(max_rel_err(fused, eager) <= tol);
      for (size_t i : {0, 1, 2, 4}) {
        CAPTURE(i);
        CHECK(max_rel_err(fused_grads[i], eager_grads[i], kGradFloor) <= 10 * tol);
      }
      // A constant added to a query's logits leaves its softmax unchanged: c_q's gradient is 0, exactly in the
      // kernel, up to rounding in the eager form.
      CHECK(fused_grads[3].abs().max().item<double>() == 0.0);
      CHECK(eager_grads[3].abs().max().item<double>() <= (dtype == torch::kFloat64 ? 1e-12 : 1e-4));
    }
  }
}

TEST_CASE("forgetting attention: open gates give causal softmax attention and closed gates give each token its value",
          "[recent_linear][fox]") {
  torch::manual_seed(90);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  auto q = torch::randn({1, 12, 2, 4}, o), k = torch::randn({1, 12, 2, 4}, o), v = torch::randn({1, 12, 2, 4}, o);
  auto open = torch::zeros({1, 12, 2}, o);
  auto got = forgetting_attention(q, k, v, open, open, 0.5, 5);
  auto logits = torch::einsum("bqhd,bkhd->bhqk", {q * 0.5, k});
  logits = logits.masked_fill(torch::ones({12, 12}, torch::kBool).triu(1), -INFINITY);
  auto expect = torch::einsum("bhqk,bkhd->bqhd", {logits.softmax(-1), v});
  CHECK(max_rel_err(got, expect) <= 1e-12);
  // log f = −1000 everywhere: every earlier key is forgotten, o_t = v_t.
  auto closed = torch::full({1, 12, 2}, -1000.0, o).cumsum(1);
  CHECK(max_rel_err(forgetting_attention(q, k, v, closed, closed, 0.5, 5), v) <= 1e-12);
}

TEST_CASE("forgetting attention: the forget gate's bias starts at 0, or at the decay times the run asks for",
          "[recent_linear][fox]") {
  auto bias_of = [](const json& args) {
    auto m = mnemo::test::build_mixer("fox", 16, 4, args, 3);
    return m->named_parameters()["f_proj.bias"].to(torch::kFloat64);
  };
  CHECK(bias_of(json::object()).abs().max().item<double>() == 0.0);
  // log σ(b_h) = −1/T_h, T_h = 4, 20, 100, 500 (log-spaced from 4 to 500 over 4 heads).
  auto b = bias_of({{"fgate_decay_time_min", 4.0}, {"fgate_decay_time_max", 500.0}});
  auto decay_time = -1.0 / torch::log_sigmoid(b);
  auto expect = torch::tensor({4.0, 20.0, 100.0, 500.0}, torch::kFloat64);
  CHECK(max_rel_err(decay_time, expect) <= 1e-5);  // fp32 parameters
  CHECK_THROWS_WITH(bias_of({{"fgate_decay_time_min", 0.0}, {"fgate_decay_time_max", 100.0}}),
                    Catch::Contains("fgate_decay_time_min") && Catch::Contains("0 < min <= max"));
  CHECK_THROWS_WITH(bias_of({{"fgate_decay_time_min", 50.0}, {"fgate_decay_time_max", 10.0}}),
                    Catch::Contains("fgate_decay_time_max"));
}

TEST_CASE("fox_pro and transformer_pro: the Pro block spelled out in fp64 (token shifts, per-channel QK-norm, RoPE, "
          "output norm and gate)",
          "[recent_linear][fox]") {
  constexpr int64_t B = 2, T = 7, d = 16, H = 2, D = d / H;
  for (const std::string family : {"fox_pro", "transformer_pro"}) {
    DYNAMIC_SECTION(family) {
      const bool transformer = family == "transformer_pro";  // no forget gate, RoPE at base 500 000
      auto m = mnemo::test::make_mixer(family, d, H, json::object(), 5);
      auto p = m->named_parameters();
      CHECK(p.contains("f_proj.weight") != transformer);
      {
        torch::NoGradGuard no_grad;  // weights per channel away from 1: a weight applied per head dim would show
        for (const char* w : {"q_norm_weight", "k_norm_weight", "o_norm_weight"}) {
          REQUIRE(p[w].sizes() == torch::IntArrayRef({d}));  // fla's GroupNorm layout: head h at [h·D, (h+1)·D)
          p[w].copy_(1 + 0.5 * torch::randn({d}, torch::kFloat64));
        }
      }
      auto x = torch::randn({B, T, d}, torch::kFloat64);
      auto lin = [&](const char* name) { return torch::matmul(x, p[std::string(name) + ".weight"].t()); };
      auto heads = [&](const torch::Tensor& y) { return y.view({B, T, H, D}); };
      // k_t = α_t k̃_{t−1} + (1 − α_t) k̃_t, α_t = σ(x_t w_α) per head, k̃_{−1} = 0.
      auto shifted = [&](const torch::Tensor& y, const char* alpha_proj) {
        auto a = torch::sigmoid(lin(alpha_proj)).unsqueeze(-1);
        auto prev = torch::cat({torch::zeros_like(y.narrow(1, 0, 1)), y.narrow(1, 0, T - 1)}, 1);
        return a * prev + (1 - a) * y;
      };
      auto rms = [](const torch::Tensor& y, const torch::Tensor& w, double eps) {
        return y / torch::sqrt(y.pow(2).mean(-1, true) + eps) * w.view({H, D});
      };
      auto rope = [&](const torch::Tensor& y) {
        return transformer ? apply_rope_reference(y.transpose(1, 2), 0, 500000.0).transpose(1, 2) : y;
      };
      auto q = rope(rms(heads(lin("q_proj")), p["q_norm_weight"], 1e-5));
      auto k = rope(rms(shifted(heads(lin("k_proj")), "k_shift_proj"), p["k_norm_weight"], 1e-5));
      auto v = shifted(heads(lin("v_proj")), "v_shift_proj");
      auto c = transformer ? torch::zeros({B, T, H}, torch::kFloat64)
                           : torch::log_sigmoid(lin("f_proj") + p["f_proj.bias"]).cumsum(1);  // [B, T, H]
      auto o = torch::zeros({B, T, H, D}, torch::kFloat64);
      for (int64_t i = 0; i < T; ++i) {
        auto s = (q.narrow(1, i, 1) * k.narrow(1, 0, i + 1)).sum(-1) / std::sqrt(double(D)) +  // [B, i+1, H]
                 c.narrow(1, i, 1) - c.narrow(1, 0, i + 1);
        o.narrow(1, i, 1).copy_((torch::softmax(s, 1).unsqueeze(-1) * v.narrow(1, 0, i + 1)).sum(1, true));
      }
      auto gated = torch::sigmoid(lin("g_proj")) * rms(o, p["o_norm_weight"], 1e-6).reshape({B, T, d});
      auto expect = torch::matmul(gated, p["o_proj.weight"].t());
      CHECK(max_rel_err(m->forward(x, nullptr), expect) <= 1e-12);
    }
  }
  // The Pro switches are fox's arguments; per-channel QK-norm needs QK-norm, decay times need the gate.
  CHECK_THROWS_WITH(mnemo::test::build_mixer("fox", d, H, {{"qk_norm_per_channel", true}}),
                    Catch::Contains("qk_norm_per_channel needs qk_norm"));
  CHECK_THROWS_WITH(mnemo::test::build_mixer("transformer_pro", d, H, {{"fgate_decay_time_min", 4.0},
                                                                       {"fgate_decay_time_max", 8.0}}),
                    Catch::Contains("use_forget_gate false"));
  CHECK(mnemo::test::build_mixer("fox", d, H, {{"use_k_shift", true}})->named_parameters().contains("k_shift_proj.weight"));
}
