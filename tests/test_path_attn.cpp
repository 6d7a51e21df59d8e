// PaTH attention kernels (docs/models.md#path-attention): the chunked form equals the token-by-token (decode) form in
// fp64 (outputs, the moved key cache, every input gradient) for several lengths and chunk sizes, with and without the
// forget gate, grouped queries and a prefix cache; one pass equals two with the cache passed on; β = 0 is the
// Forgetting Transformer's attention; one token spelled out; bad inputs refused. The mixer's causality, decode ==
// forward and gradients are in the mixer contract (tests/test_mixer_contract.cpp), flash-linear-attention's fixtures
// in tests/test_kernel_fixtures.cpp.
#include <catch2/catch.hpp>

#include "runtime/forgetting_attn/forgetting_attn.h"
#include "runtime/layers.h"
#include "runtime/path_attn/path_attn.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace path_attn_test {

constexpr double kPathScale = 0.35;

struct PathInputs {
  torch::Tensor q, k, v, w, beta, log_f;  // log_f [B, Tk, HQ] or undefined; k, v cover the prefix too
  int64_t prefix = 0;
  std::vector<torch::Tensor> leaves() const {
    std::vector<torch::Tensor> out = {q, k, v, w, beta};
    if (log_f.defined()) out.push_back(log_f);
    return out;
  }
};

PathInputs make_path_inputs(int64_t B, int64_t T, int64_t HQ, int64_t H, int64_t D, int64_t Dv, bool gated,
                            int64_t prefix, uint64_t seed) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  PathInputs in;
  in.prefix = prefix;
  in.q = torch::randn({B, T, HQ, D}, o).requires_grad_();
  in.k = torch::randn({B, prefix + T, H, D}, o).requires_grad_();
  in.v = torch::randn({B, prefix + T, H, Dv}, o).requires_grad_();
  in.w = l2norm(torch::randn({B, T, H, D}, o)).detach().requires_grad_();
  in.beta = (2.0 * torch::sigmoid(torch::randn({B, T, H}, o))).detach().requires_grad_();
  if (gated) in.log_f = torch::log_sigmoid(torch::randn({B, prefix + T, HQ}, o) + 2.0).detach().requires_grad_();
  return in;
}

struct PathRun {
  torch::Tensor o, keys;
  std::vector<torch::Tensor> grads;
};

// chunk 0: the token-by-token form. Gradients of a fixed random linear functional of (o, moved keys).
PathRun run_path(const PathInputs& in, int64_t chunk) {
  torch::Tensor c_q, c_k;
  if (in.log_f.defined()) {
    c_k = in.log_f.cumsum(1);
    c_q = c_k.narrow(1, in.prefix, in.q.size(1));
  }
  auto r = chunk == 0 ? path_attention_recurrent(in.q, in.k, in.v, in.w, in.beta, c_q, c_k, kPathScale)
                      : path_attention(in.q, in.k, in.v, in.w, in.beta, c_q, c_k, kPathScale, chunk);
  torch::manual_seed(4321);
  auto wo = torch::randn(r.o.sizes(), r.o.options()), wk = torch::randn(r.keys.sizes(), r.keys.options());
  auto loss = (r.o * wo).sum() + (r.keys * wk).sum();
  return {r.o.detach(), r.keys.detach(), torch::autograd::grad({loss}, in.leaves(), {}, false, false, true)};
}

void check_path_same(const PathRun& got, const PathRun& ref, double* worst) {
  const double eo = max_rel_err(got.o, ref.o), ek = max_rel_err(got.keys, ref.keys);
  CHECK(eo <= 1e-11);
  CHECK(ek <= 1e-11);
  *worst = std::max({*worst, eo, ek});
  REQUIRE(got.grads.size() == ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got.grads[i].defined() == ref.grads[i].defined());
    if (!ref.grads[i].defined()) continue;
    const double e = max_rel_err(got.grads[i], ref.grads[i], 1e-6);
    CHECK(e <= 1e-9);
    *worst = std::max(*worst, e);
  }
}

}  // namespace path_attn_test

using namespace path_attn_test;

TEST_CASE("path_attn: chunk form equals the token-by-token form in fp64 (outputs, moved keys, gradients)",
          "[path_attn]") {
  double worst = 0;
  for (int64_t T : {1, 7, 63, 100}) {
    for (bool gated : {false, true}) {
      for (int64_t prefix : {0, 5}) {
        auto in = make_path_inputs(2, T, 4, 2, 8, 6, gated, prefix, 300 + T + (gated ? 1 : 0) + prefix);
        auto ref = run_path(in, 0);
        for (int64_t C : {16, 64, 7, 1}) {
          CAPTURE(T, gated, prefix, C);
          check_path_same(run_path(in, C), ref, &worst);
        }
      }
    }
  }
  WARN("path_attn chunk vs token-by-token: worst relative error " << worst);
}

TEST_CASE("path_attn: one pass equals two with the moved key cache passed on", "[path_attn]") {
  auto in = make_path_inputs(2, 50, 2, 2, 8, 8, true, 0, 311);
  auto c = in.log_f.detach().cumsum(1);
  auto q = in.q.detach(), k = in.k.detach(), v = in.v.detach(), w = in.w.detach(), b = in.beta.detach();
  auto full = path_attention_recurrent(q, k, v, w, b, c, c, kPathScale);
  const int64_t s = 23;
  auto first = path_attention(q.narrow(1, 0, s), k.narrow(1, 0, s), v.narrow(1, 0, s), w.narrow(1, 0, s),
                              b.narrow(1, 0, s), c.narrow(1, 0, s), c.narrow(1, 0, s), kPathScale, 16);
  auto keys = torch::cat({first.keys, k.narrow(1, s, 50 - s)}, 1);
  for (int64_t C : {0, 16}) {
    CAPTURE(C);
    auto rest_q = q.narrow(1, s, 50 - s), rest_w = w.narrow(1, s, 50 - s), rest_b = b.narrow(1, s, 50 - s);
    auto second = C == 0 ? path_attention_recurrent(rest_q, keys, v, rest_w, rest_b, c.narrow(1, s, 50 - s), c,
                                                    kPathScale)
                         : path_attention(rest_q, keys, v, rest_w, rest_b, c.narrow(1, s, 50 - s), c, kPathScale, C);
    CHECK(max_rel_err(torch::cat({first.o, second.o}, 1), full.o) <= 1e-12);
    CHECK(max_rel_err(second.keys, full.keys) <= 1e-12);
  }
}

TEST_CASE("path_attn with beta = 0 is the Forgetting Transformer's attention", "[path_attn]") {
  auto in = make_path_inputs(2, 37, 2, 2, 8, 8, true, 0, 312);
  auto q = in.q.detach(), k = in.k.detach(), v = in.v.detach(), w = in.w.detach();
  auto zero = torch::zeros_like(in.beta);
  auto c = in.log_f.detach().cumsum(1);
  // fox does not scale its gate term: hand it c / scale so that both compute scale (q·k + c_i − c_j).
  auto fox = forgetting_attention(q, k, v, c * kPathScale, c * kPathScale, kPathScale, 16);
  for (int64_t C : {0, 16}) {
    CAPTURE(C);
    auto r = C == 0 ? path_attention_recurrent(q, k, v, w, zero, c, c, kPathScale)
                    : path_attention(q, k, v, w, zero, c, c, kPathScale, C);
    CHECK(max_rel_err(r.o, fox) <= 1e-12);
    CHECK(max_rel_err(r.keys, k) <= 1e-14);
  }
}

TEST_CASE("path_attn: three tokens spelled out", "[path_attn]") {
  auto in = make_path_inputs(1, 3, 1, 1, 4, 3, true, 0, 313);
  auto q = in.q.detach().view({3, 4}), k = in.k.detach().view({3, 4}), v = in.v.detach().view({3, 3});
  auto w = in.w.detach().view({3, 4}), b = in.beta.detach().view({3}), c = in.log_f.detach().view({3}).cumsum(0);
  auto Hm = [&](int64_t t) { return torch::eye(4, q.options()) - b[t] * torch::outer(w[t], w[t]); };
  // query 2: keys H_2 H_1 k_0, H_2 k_1, k_2
  auto keys = torch::stack({Hm(2).matmul(Hm(1)).matmul(k[0]), Hm(2).matmul(k[1]), k[2]});
  auto logits = kPathScale * (keys.matmul(q[2]) + c[2] - c);
  auto expect = torch::softmax(logits, 0).matmul(v);
  for (int64_t C : {0, 2}) {
    CAPTURE(C);
    auto r = C == 0 ? path_attention_recurrent(in.q.detach(), in.k.detach(), in.v.detach(), in.w.detach(),
                                               in.beta.detach(), in.log_f.detach().cumsum(1),
                                               in.log_f.detach().cumsum(1), kPathScale)
                    : path_attention(in.q.detach(), in.k.detach(), in.v.detach(), in.w.detach(), in.beta.detach(),
                                     in.log_f.detach().cumsum(1), in.log_f.detach().cumsum(1), kPathScale, C);
    CHECK(max_rel_err(r.o.view({3, 3})[2], expect) <= 1e-13);
    CHECK(max_rel_err(r.keys.view({3, 4}), keys) <= 1e-13);
  }
}

TEST_CASE("path_attn: the fp32 chunk form stays close to the fp64 token-by-token form", "[path_attn]") {
  auto in = make_path_inputs(1, 200, 2, 2, 16, 16, true, 0, 314);
  auto c = in.log_f.detach().cumsum(1);
  auto ref = path_attention_recurrent(in.q.detach(), in.k.detach(), in.v.detach(), in.w.detach(), in.beta.detach(),
                                      c, c, kPathScale);
  auto f = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat32); };
  auto got = path_attention(f(in.q), f(in.k), f(in.v), f(in.w), f(in.beta), f(c), f(c), kPathScale, 64);
  REQUIRE(got.o.scalar_type() == torch::kFloat32);
  CHECK(max_rel_err(got.o.to(torch::kFloat64), ref.o) <= 1e-4);
  CHECK(max_rel_err(got.keys.to(torch::kFloat64), ref.keys) <= 1e-4);
}

TEST_CASE("path_attn: bad inputs are refused naming the tensor", "[path_attn]") {
  auto in = make_path_inputs(1, 8, 4, 2, 4, 4, true, 0, 315);
  auto q = in.q.detach(), k = in.k.detach(), v = in.v.detach(), w = in.w.detach(), b = in.beta.detach();
  auto c = in.log_f.detach().cumsum(1);
  CHECK_THROWS_WITH(path_attention(q, k, v, w.narrow(-1, 0, 3), b, c, c, kPathScale, 4), Catch::Contains("w"));
  CHECK_THROWS_WITH(path_attention_recurrent(q, k, v, w, b.narrow(1, 0, 5), c, c, kPathScale),
                    Catch::Contains("beta"));
  CHECK_THROWS_WITH(path_attention(q.narrow(2, 0, 3), k, v, w, b, c, c, kPathScale, 4), Catch::Contains("heads"));
  CHECK_THROWS_WITH(path_attention(q, k, v, w, b, c, torch::Tensor(), kPathScale, 4),
                    Catch::Contains("both given or both absent"));
  CHECK_THROWS_WITH(path_attention(q, k.narrow(1, 0, 5), v, w, b, c, c, kPathScale, 4), Catch::Contains("keys"));
  CHECK_THROWS_WITH(path_attention(q, k, v, w, b, c, c, kPathScale, 0), Catch::Contains("chunk_size must be >= 1"));
}

TEST_CASE("path_attn mixer: with the forget gate and a full-rank w, pieces through the state equal one forward (fp64)",
          "[path_attn]") {
  for (bool low_rank : {false, true}) {
    for (const std::string form : {"chunk", "recurrent"}) {
      CAPTURE(low_rank, form);
      auto m = mnemo::test::make_mixer("path_attn", 16, 2,
                                       {{"use_forget_gate", true}, {"use_low_rank_w", low_rank}, {"chunk_size", 4},
                                        {"form", form}},
                                       7);
      torch::NoGradGuard no_grad;
      torch::manual_seed(316);
      auto x = torch::randn({2, 23, 16}, torch::kFloat64);
      auto full = m->forward(x, nullptr);
      // A prefill, a multi-token piece after the cache (the chunked form with cached keys), then single tokens.
      LayerState state;
      std::vector<torch::Tensor> pieces;
      int64_t at = 0;
      for (int64_t len : {6, 9, 1, 1, 5, 1}) {
        pieces.push_back(m->forward(x.narrow(1, at, len), &state));
        state.pos += len;
        at += len;
      }
      CHECK(state.tensors.count("c") == 1);
      CHECK(state.tensors.at("k").size(1) == at);
      CHECK(max_rel_err(torch::cat(pieces, 1), full.narrow(1, 0, at)) <= 1e-10);
    }
  }
}

TEST_CASE("path_attn mixer: bad arguments are refused", "[path_attn]") {
  CHECK_THROWS_WITH(mnemo::test::make_mixer("path_attn", 16, 2, {{"conv_size", 0}}, 1), Catch::Contains("conv_size"));
  CHECK_THROWS_WITH(mnemo::test::make_mixer("path_attn", 16, 2, {{"chunk_size", 0}}, 1), Catch::Contains("chunk_size"));
  CHECK_THROWS_WITH(mnemo::test::make_mixer("path_attn", 16, 2, {{"form", "fused"}}, 1), Catch::Contains("form"));
  CHECK_THROWS_WITH(mnemo::test::make_mixer("path_attn", 18, 4, json::object(), 1), Catch::Contains("heads"));
}
