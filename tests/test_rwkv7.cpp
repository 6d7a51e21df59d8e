// RWKV-7 kernels (docs/models.md#rwkv-7): chunked form == token-by-token form in fp64 (outputs, final state, every
// gradient), including decays past the factorisation limit and partial last chunks; the reduction to Kimi Delta
// Attention; state passing across a split; bad shapes refused. The mixer's causality, decode == forward and
// gradients are in the mixer contract (tests/test_mixer_contract.cpp), the flash-linear-attention fixtures in
// tests/test_kernel_fixtures.cpp.
#include <catch2/catch.hpp>

#include "engine/config/presets.h"
#include "engine/config/run_config.h"
#include "engine/io/fla_import.h"
#include "runtime/kda/kda.h"
#include "runtime/kernels/chunking.h"
#include "runtime/layers.h"
#include "runtime/model.h"
#include "runtime/rwkv7/channel_mix.h"
#include "runtime/rwkv7/rwkv7.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::make_mixer;
using mnemo::test::max_rel_err;
using mnemo::test::randn_f64;

namespace {

constexpr double kRwkv7GradFloor = 1e-6;  // relative errors of gradients against a scale floored here
constexpr double kRwkv7Scale = 0.3;

struct Rwkv7Inputs {
  torch::Tensor r, w, k, v, a, b, h0;  // h0 undefined when not used
  std::vector<torch::Tensor> leaves() const {
    std::vector<torch::Tensor> out = {r, w, k, v, a, b};
    if (h0.defined()) out.push_back(h0);
    return out;
  }
};

// The layer's parameterisation with random values: κ̂ l2-normalised, a = −κ̂, b = κ̂ ⊙ σ(N), w = −e^{−1/2} σ(N) ·
// decay_scale (log decay per key channel); r, k, v normals (k halved).
Rwkv7Inputs make_rwkv7_inputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, bool with_state, uint64_t seed,
                   double decay_scale = 1.0) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  auto kappa = l2norm(torch::randn({B, T, H, K}, o));
  Rwkv7Inputs in;
  in.r = torch::randn({B, T, H, K}, o).requires_grad_();
  in.w = (-std::exp(-0.5) * torch::sigmoid(torch::randn({B, T, H, K}, o)) * decay_scale).detach().requires_grad_();
  in.k = (0.5 * torch::randn({B, T, H, K}, o)).detach().requires_grad_();
  in.v = torch::randn({B, T, H, V}, o).requires_grad_();
  in.a = (-kappa).detach().requires_grad_();
  in.b = (kappa * torch::sigmoid(torch::randn({B, T, H, K}, o))).detach().requires_grad_();
  if (with_state) in.h0 = torch::randn({B, H, K, V}, o).requires_grad_();
  return in;
}

struct Rwkv7Run {
  torch::Tensor o, state;
  std::vector<torch::Tensor> grads;
};

// Outputs and the gradients of a fixed random linear functional of (o, final state) w.r.t. every input.
Rwkv7Run run_rwkv7(const Rwkv7Inputs& in, int64_t chunk, int64_t sub_chunk = 16) {
  auto res = chunk == 0 ? rwkv7_recurrent(in.r, in.w, in.k, in.v, in.a, in.b, in.h0, kRwkv7Scale)
                        : rwkv7_chunk(in.r, in.w, in.k, in.v, in.a, in.b, in.h0, kRwkv7Scale, chunk, sub_chunk);
  torch::manual_seed(1234);
  auto wo = torch::randn(res.o.sizes(), res.o.options()), ws = torch::randn(res.final_state.sizes(), res.o.options());
  auto loss = (res.o * wo).sum() + (res.final_state * ws).sum();
  return {res.o.detach(), res.final_state.detach(), torch::autograd::grad({loss}, in.leaves())};
}

void check_rwkv7_same(const Rwkv7Run& got, const Rwkv7Run& ref) {
  CHECK(max_rel_err(got.o, ref.o) <= 1e-10);
  CHECK(max_rel_err(got.state, ref.state) <= 1e-10);
  REQUIRE(got.grads.size() == ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    CAPTURE(i);
    CHECK(max_rel_err(got.grads[i], ref.grads[i], kRwkv7GradFloor) <= 1e-8);
  }
}

}  // namespace

TEST_CASE("rwkv7: chunk form equals the recurrence in fp64 (outputs, final state, gradients)", "[rwkv7]") {
  for (int64_t T : {1, 7, 63, 100}) {
    for (bool with_state : {false, true}) {
      auto in = make_rwkv7_inputs(2, T, 2, 8, 12, with_state, 140 + T);
      auto ref = run_rwkv7(in, 0);
      for (auto [C, sub] : std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {64, 16}, {7, 16}, {1, 16}}) {
        CAPTURE(T, with_state, C, sub);
        check_rwkv7_same(run_rwkv7(in, C, sub), ref);
      }
    }
  }
}

TEST_CASE("rwkv7: strong per-channel decay (past the factorisation limit) stays exact and finite", "[rwkv7]") {
  // log decays about −12 per step on average: a 64-row chunk spans far past fp64's factorisation limit; the
  // sub-chunk form keeps every exponent <= 0.
  auto in = make_rwkv7_inputs(2, 100, 2, 8, 12, true, 151, 40.0);
  REQUIRE_FALSE(decay_factorisable(to_chunks(in.w.detach(), 64).cumsum(-2)));
  auto ref = run_rwkv7(in, 0);
  for (int64_t sub : {16, 5}) {
    CAPTURE(sub);
    auto got = run_rwkv7(in, 64, sub);
    check_rwkv7_same(got, ref);
    for (const auto& g : got.grads) CHECK(torch::isfinite(g).all().item<bool>());
  }
}

TEST_CASE("rwkv7: the fp32 chunk form with 64-row chunks stays close to the fp64 recurrence", "[rwkv7]") {
  // The layer's decay bound (e^{-1/2} per step) lets a 64-row chunk span up to ~39 nats: the factorised path in fp32.
  auto in = make_rwkv7_inputs(1, 256, 2, 16, 16, true, 156);
  auto ref = rwkv7_recurrent(in.r, in.w, in.k, in.v, in.a, in.b, in.h0, kRwkv7Scale);
  auto f32 = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat32); };
  auto got = rwkv7_chunk(f32(in.r), f32(in.w), f32(in.k), f32(in.v), f32(in.a), f32(in.b), f32(in.h0), kRwkv7Scale, 64);
  REQUIRE(got.o.scalar_type() == torch::kFloat32);
  CHECK(max_rel_err(got.o.to(torch::kFloat64), ref.o.detach()) <= 1e-4);
  CHECK(max_rel_err(got.final_state.to(torch::kFloat64), ref.final_state.detach()) <= 1e-4);
}

TEST_CASE("rwkv7 with a = -beta k e^w, b = k and keys beta k is Kimi Delta Attention", "[rwkv7]") {
  // (D + bᵀa) S + k'ᵀ v = (I − β kᵀk) D S + β kᵀ v: KDA's decay, then the delta-rule write.
  torch::manual_seed(152);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t B = 2, T = 37, H = 2, K = 8, V = 6;
  auto q = torch::randn({B, T, H, K}, o), k = l2norm(torch::randn({B, T, H, K}, o)), v = torch::randn({B, T, H, V}, o);
  auto beta = torch::sigmoid(torch::randn({B, T, H}, o)) * 2.0;
  auto g = torch::log_sigmoid(torch::randn({B, T, H, K}, o) + 2.0);
  auto h0 = torch::randn({B, H, K, V}, o);
  auto ref = kda_recurrent(q, k, v, beta, g, h0, kRwkv7Scale);
  auto bk = beta.unsqueeze(-1) * k;
  for (int64_t C : {0, 16}) {
    CAPTURE(C);
    auto res = C == 0 ? rwkv7_recurrent(q, g, bk, v, -bk * g.exp(), k, h0, kRwkv7Scale)
                      : rwkv7_chunk(q, g, bk, v, -bk * g.exp(), k, h0, kRwkv7Scale, C);
    CHECK(max_rel_err(res.o, ref.o) <= 1e-12);
    CHECK(max_rel_err(res.final_state, ref.final_state) <= 1e-12);
  }
}

TEST_CASE("rwkv7: one token spelled out from a known state", "[rwkv7]") {
  auto in = make_rwkv7_inputs(1, 1, 1, 4, 3, true, 153);
  auto S0 = in.h0.detach().view({4, 3});
  auto w = in.w.detach().view({4}), k = in.k.detach().view({4}), v = in.v.detach().view({3});
  auto a = in.a.detach().view({4}), b = in.b.detach().view({4}), r = in.r.detach().view({4});
  auto S = (torch::diag(w.exp()) + torch::outer(b, a)).matmul(S0) + torch::outer(k, v);
  auto expect = kRwkv7Scale * r.matmul(S);
  auto res = rwkv7_recurrent(in.r, in.w, in.k, in.v, in.a, in.b, in.h0, kRwkv7Scale);
  CHECK(max_rel_err(res.o.view({3}), expect) <= 1e-13);
  CHECK(max_rel_err(res.final_state.view({4, 3}), S) <= 1e-13);
}

TEST_CASE("rwkv7: one pass equals two halves with the state passed on", "[rwkv7]") {
  auto in = make_rwkv7_inputs(1, 50, 2, 8, 8, true, 154);
  auto whole = rwkv7_chunk(in.r, in.w, in.k, in.v, in.a, in.b, in.h0, kRwkv7Scale, 16);
  auto part = [&](const torch::Tensor& t, int64_t start, int64_t len) { return t.narrow(1, start, len); };
  auto first = rwkv7_chunk(part(in.r, 0, 21), part(in.w, 0, 21), part(in.k, 0, 21), part(in.v, 0, 21),
                           part(in.a, 0, 21), part(in.b, 0, 21), in.h0, kRwkv7Scale, 16);
  auto second = rwkv7_recurrent(part(in.r, 21, 29), part(in.w, 21, 29), part(in.k, 21, 29), part(in.v, 21, 29),
                                part(in.a, 21, 29), part(in.b, 21, 29), first.final_state, kRwkv7Scale);
  CHECK(max_rel_err(torch::cat({first.o, second.o}, 1), whole.o) <= 1e-12);
  CHECK(max_rel_err(second.final_state, whole.final_state) <= 1e-12);
}

TEST_CASE("rwkv7: bad shapes are refused naming the tensor", "[rwkv7]") {
  auto in = make_rwkv7_inputs(1, 5, 2, 8, 8, false, 155);
  auto short_a = in.a.detach().narrow(-1, 0, 4);
  CHECK_THROWS_WITH(rwkv7_recurrent(in.r, in.w, in.k, in.v, short_a, in.b, {}, kRwkv7Scale), Catch::Contains("input 'a'"));
  auto scalar_w = in.w.detach().select(-1, 0);
  CHECK_THROWS_WITH(rwkv7_chunk(in.r, scalar_w, in.k, in.v, in.a, in.b, {}, kRwkv7Scale, 16), Catch::Contains("input 'w'"));
  auto bad_state = torch::zeros({1, 2, 8, 7}, in.v.options());
  CHECK_THROWS_WITH(rwkv7_recurrent(in.r, in.w, in.k, in.v, in.a, in.b, bad_state, kRwkv7Scale),
                    Catch::Contains("initial_state"));
  CHECK_THROWS_WITH(rwkv7_chunk(in.r, in.w, in.k, in.v, in.a, in.b, {}, kRwkv7Scale, 0), Catch::Contains("chunk_size"));
}

TEST_CASE("rwkv7 mixer: chunk and recurrent forms agree and decode carries the last input and the state", "[rwkv7]") {
  const json chunked = {{"chunk_size", 4}, {"rwkv7_sub_chunk", 2}};
  auto m_chunk = make_mixer("rwkv7", 16, 2, chunked, 5);
  auto m_rec = make_mixer("rwkv7", 16, 2, {{"form", "recurrent"}}, 5);
  torch::manual_seed(6);
  auto x = randn_f64({2, 11, 16});
  CHECK(max_rel_err(m_chunk->forward(x, nullptr), m_rec->forward(x, nullptr)) <= 1e-10);
  LayerState state;
  m_chunk->forward(x, &state);
  REQUIRE(state.has("shift"));
  REQUIRE(state.has("memory"));
  CHECK(max_rel_err(state.at("shift"), x.select(1, 10)) == 0);
  CHECK(state.at("memory").sizes() == torch::IntArrayRef({2, 2, 8, 8}));
}

TEST_CASE("rwkv7 mixer: bad sizes are refused naming the argument", "[rwkv7]") {
  CHECK_THROWS_WITH(make_mixer("rwkv7", 16, 3, json::object()), Catch::Contains("divisible"));
  CHECK_THROWS_WITH(make_mixer("rwkv7", 16, 2, {{"group_norm_eps", 0.0}}), Catch::Contains("group_norm_eps"));
  CHECK_THROWS_WITH(make_mixer("rwkv7", 16, 2, {{"rwkv7_sub_chunk", 0}}), Catch::Contains("rwkv7_sub_chunk"));
}

TEST_CASE("rwkv7 model: RWKV-7's block (LayerNorm, a norm after the embedding, the channel mix, the value residual)",
          "[rwkv7][model]") {
  // The family sets RWKV's block itself; a run's resolved configuration carries it.
  const json run = resolve_run_config({{"model", "rwkv7"}, {"task", "mqar"}});
  CHECK(run.at("block_norm") == "layernorm");
  CHECK(run.at("embed_norm") == true);
  CHECK(run.at("block_ffn") == "rwkv_channel_mix");
  CHECK(run.at("value_residual") == true);
  json cfg = {{"model", "rwkv7"}, {"vocab_size", 37}, {"d_model", 16}, {"n_layers", 3}, {"n_heads", 2},
              {"chunk_size", 4}, {"block_norm", "layernorm"}, {"embed_norm", true}, {"block_ffn", "rwkv_channel_mix"}};
  auto mc = model_config_from_json(cfg);
  torch::manual_seed(1);
  LanguageModel model(mc);
  model->to(torch::kFloat64);
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : model->named_parameters()) params[p.key()] = p.value();
  for (const char* name : {"embed_norm.weight", "embed_norm.bias", "final_norm.bias", "block0.mixer_norm.bias",
                           "block0.mlp_norm.bias", "block0.channel_mix.x_k", "block0.channel_mix.key.weight",
                           "block0.channel_mix.value.weight", "block1.mixer.v_down.weight", "block2.mixer.v_up.bias"})
    CHECK(params.count(name) == 1);
  CHECK(params.count("block0.mixer.v_up.bias") == 0);  // the first layer hands its values on; it has no gate
  CHECK(params.at("block0.channel_mix.key.weight").size(0) == channel_mix_hidden_size(16, 4.0));
  CHECK(count_parameters(mc) == model->num_parameters());

  auto ids = torch::randint(37, {2, 11}, torch::kInt64);
  SECTION("prefill + token-by-token decoding equals the full forward in fp64") {
    torch::NoGradGuard no_grad;
    auto full = model->forward(ids);
    ModelState state = model->initial_state();
    std::vector<torch::Tensor> steps = {model->forward(ids.narrow(1, 0, 5), &state)};
    for (int64_t t = 5; t < 11; ++t) steps.push_back(model->forward(ids.narrow(1, t, 1), &state));
    CHECK(max_rel_err(torch::cat(steps, 1), full) <= 1e-10);
    CHECK(state[0].has("channel_mix.shift"));
  }
  SECTION("v <- lerp(v, v_first, sigmoid(gate)): a gate at 1 takes layer 0's values, one at 0 the layer's own") {
    auto v_proj_grad = [&](double gate_bias) {
      {
        torch::NoGradGuard no_grad;
        params.at("block1.mixer.v_up.weight").zero_();
        params.at("block1.mixer.v_up.bias").fill_(gate_bias);
      }
      model->zero_grad();
      model->forward(ids).pow(2).sum().backward();
      return params.at("block1.mixer.v_proj.weight").grad().abs().max().item<double>();
    };
    CHECK(v_proj_grad(80.0) < 1e-25);  // σ(80) = 1 − 2e-35: layer 1's own values are not used
    CHECK(v_proj_grad(-80.0) > 1e-6);  // σ(−80) ≈ 0: only its own
    CHECK(params.at("block0.mixer.v_proj.weight").grad().abs().max().item<double>() > 1e-6);
  }
}

TEST_CASE("rwkv7: import-fla maps fla's rwkv7 config, and refuses what mnemo does not compute", "[rwkv7]") {
  const json config = {{"model_type", "rwkv7"},  {"hidden_size", 64}, {"num_hidden_layers", 2}, {"num_heads", 4},
                       {"head_dim", 16},         {"vocab_size", 100}, {"intermediate_size", 224}};
  const FlaModel m = fla_config_to_mnemo(config, "config.json");
  CHECK(m.family == "rwkv7");
  CHECK(m.model_keys.at("block_norm") == "layernorm");
  CHECK(m.model_keys.at("block_ffn") == "rwkv_channel_mix");
  CHECK(m.model_keys.at("embed_norm") == true);
  CHECK(m.model_keys.at("norm_eps") == 1e-5);
  CHECK(channel_mix_hidden_size(64, m.model_keys.at("mlp_ratio").get<double>()) == 224);
  CHECK(m.model_keys.at("v_low_rank_dim") == 16);
  auto refused = [&](json change, const std::string& reason) {
    json c = config;
    c.update(change);
    CHECK_THROWS_WITH(fla_config_to_mnemo(c, "config.json"),
                      Catch::Contains("cannot import fla rwkv7 exactly") && Catch::Contains(reason));
  };
  refused({{"value_dim", 128}}, "value_dim");
  refused({{"hidden_act", "relu"}}, "sqrelu");
  refused({{"intermediate_size", 100}}, "multiple of 32");
  refused({{"attn", {{"layers", {1}}}}}, "hybrid");
}
