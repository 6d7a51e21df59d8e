// GLA kernels and mixer (docs/models.md#gla, docs/models.md#numerical-stability, docs/models.md#verification): fixtures, chunk == recurrent with
// gradients (sub-chunk sizes included), stability under strong key-wise decay, state passing,
// mixer decode == forward.
#include "runtime/gla/gla.h"
#include "tests/mixer_test_util.h"

using namespace mnemo;
using namespace mnemo::test;

namespace {

struct GlaCase {
  torch::Tensor q, k, v, gk, s0;
};

GlaCase make_case(int64_t T, int64_t B = 2, int64_t H = 2, int64_t K = 8, int64_t V = 12) {
  return {randn_f64({B, T, H, K}), randn_f64({B, T, H, K}), randn_f64({B, T, H, V}),
          torch::log_sigmoid(randn_f64({B, T, H, K}) + 2.0), randn_f64({B, H, K, V})};
}

KernelFn gla_fn(bool chunked, int64_t C, int64_t sub) {
  return [=](const std::vector<torch::Tensor>& in) {
    torch::Tensor s0 = in.size() > 4 ? in[4] : torch::Tensor();
    auto r = chunked ? gla_chunk(in[0], in[1], in[2], in[3], 0.3, s0, C, sub)
                     : gla_recurrent(in[0], in[1], in[2], in[3], 0.3, s0);
    return std::vector<torch::Tensor>{r.o, r.final_state};
  };
}

}  // namespace

TEST_CASE("gla kernels match the fla fixtures", "[linear1][gla][fixtures]") {
  CHECK(check_op_fixtures("gla") == 3);
}

TEST_CASE("gla chunked == recurrent in fp64, outputs and gradients", "[linear1][gla]") {
  torch::manual_seed(1);
  const std::vector<std::string> names = {"q", "k", "v", "gk", "initial_state"};
  for (int64_t T : {1, 7, 63, 100}) {
    for (int64_t C : {16, 64}) {
      for (bool with_state : {false, true}) {
        INFO("T " << T << " C " << C << " state " << with_state);
        auto c = make_case(T);
        std::vector<torch::Tensor> inputs = {c.q, c.k, c.v, c.gk};
        if (with_state) inputs.push_back(c.s0);
        require_same_outputs_and_grads(gla_fn(false, 0, 0), gla_fn(true, C, 16), inputs, names);
      }
    }
  }
}

TEST_CASE("gla chunked form is exact for every sub-chunk size and in the factorised form", "[linear1][gla]") {
  torch::manual_seed(2);
  auto c = make_case(45);
  const std::vector<std::string> names = {"q", "k", "v", "gk", "initial_state"};
  // (chunk, sub-chunk): several off-diagonal blocks, a non-divisor (-> largest divisor), size 1.
  // Key channel 0 decays by -40 per step: every chunk of >= 8 tokens spans more than fp64's
  // factorisation limit (300), so the sub-chunk path runs; the other channels keep moderate decays and
  // carry information across sub-chunks and chunks.
  auto gk = c.gk.clone();
  gk.select(-1, 0).fill_(-40.0);
  for (auto [C, sub] : std::vector<std::pair<int64_t, int64_t>>{{16, 4}, {20, 6}, {12, 1}, {64, 16}}) {
    INFO("C " << C << " sub " << sub);
    CHECK_FALSE(decay_factorisable(torch::cumsum(to_chunks(gk, C), -2)));
    require_same_outputs_and_grads(gla_fn(false, 0, 0), gla_fn(true, C, sub), {c.q, c.k, c.v, gk, c.s0},
                                   names);
  }
  // Moderate decays everywhere: the whole-chunk factorised form.
  CHECK(decay_factorisable(torch::cumsum(to_chunks(c.gk, 64), -2)));
  require_same_outputs_and_grads(gla_fn(false, 0, 0), gla_fn(true, 64, 16), {c.q, c.k, c.v, c.gk, c.s0}, names);
}

TEST_CASE("gla chunk form stays finite under strong key-wise decay", "[linear1][gla]") {
  // Log-decays down to -30 per step: in-chunk cumulative sums reach about -1900, so exp(-B)
  // alone would overflow even in fp64. The secondary chunking only exponentiates values <= 0.
  torch::manual_seed(3);
  auto c = make_case(64);
  auto gk = -30.0 * torch::rand_like(c.gk);
  auto ref = gla_recurrent(c.q, c.k, c.v, gk, 0.3, c.s0);
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    auto r = gla_chunk(c.q.to(dtype), c.k.to(dtype), c.v.to(dtype), gk.to(dtype), 0.3, c.s0.to(dtype), 64, 16);
    CHECK(torch::isfinite(r.o).all().item<bool>());
    CHECK(torch::isfinite(r.final_state).all().item<bool>());
    CHECK(max_rel_err(r.o, ref.o) < (dtype == torch::kFloat64 ? 1e-12 : 1e-3));
    CHECK(max_rel_err(r.final_state, ref.final_state) < (dtype == torch::kFloat64 ? 1e-12 : 1e-3));
  }
}

TEST_CASE("gla with zero decay equals linear attention's recurrence", "[linear1][gla]") {
  torch::manual_seed(4);
  auto c = make_case(30);
  auto zero = torch::zeros_like(c.gk);
  auto r = gla_chunk(c.q, c.k, c.v, zero, 0.3, c.s0, 16);
  // S_t = S_0 + Σ_{s<=t} k_sᵀ v_s, o_t = 0.3 q_t S_t, computed directly.
  auto S_t = c.s0.unsqueeze(1) + torch::cumsum(torch::einsum("bthk,bthv->bthkv", {c.k, c.v}), 1);  // [B,T,H,K,V]
  auto expected = 0.3 * torch::einsum("bthk,bthkv->bthv", {c.q, S_t});
  CHECK(max_rel_err(r.o, expected) < 1e-12);
}

TEST_CASE("gla state passing: one pass == two halves", "[linear1][gla]") {
  torch::manual_seed(5);
  auto c = make_case(70);
  for (int64_t split : {1, 21, 32}) {
    INFO("split " << split);
    auto full = gla_chunk(c.q, c.k, c.v, c.gk, 0.3, c.s0, 16);
    auto first = gla_chunk(c.q.slice(1, 0, split), c.k.slice(1, 0, split), c.v.slice(1, 0, split),
                           c.gk.slice(1, 0, split), 0.3, c.s0, 16);
    auto second = gla_chunk(c.q.slice(1, split), c.k.slice(1, split), c.v.slice(1, split),
                            c.gk.slice(1, split), 0.3, first.final_state, 16);
    CHECK(max_rel_err(torch::cat({first.o, second.o}, 1), full.o) < 1e-12);
    CHECK(max_rel_err(second.final_state, full.final_state) < 1e-12);
  }
}

TEST_CASE("gla mixer: decode token by token == full forward", "[linear1][gla][mixer]") {
  CHECK(mixer_decode_error("gla", json::object(), torch::kFloat64) < 1e-10);
  CHECK(mixer_decode_error("gla", {{"form", "recurrent"}}, torch::kFloat64) < 1e-10);
  CHECK(mixer_decode_error("gla", {{"short_conv", true}, {"chunk_size", 3}}, torch::kFloat64) < 1e-10);
  CHECK(mixer_decode_error("gla", json::object(), torch::kFloat32) < 2e-3);
}

TEST_CASE("gla mixer: chunk form == recurrent form, bad args rejected", "[linear1][gla][mixer]") {
  auto chunked = make_mixer("gla", 32, 2, {{"chunk_size", 4}, {"gla_sub_chunk", 2}}, 11);
  auto recurrent = make_mixer("gla", 32, 2, {{"form", "recurrent"}}, 11);
  auto x = randn_f64({2, 9, 32});
  CHECK(max_rel_err(chunked->forward(x, nullptr), recurrent->forward(x, nullptr)) < 1e-10);
  CHECK_THROWS_WITH(build_mixer("gla", 32, 2, {{"gla_gate_rank", 0}}, 1), Catch::Contains("gla_gate_rank"));
  CHECK_THROWS_WITH(build_mixer("gla", 32, 2, {{"expand_v", -1.0}}, 1), Catch::Contains("expand_v"));
}
