// Scalar-decay linear attention (simple GLA), RetNet retention and the retnet mixer
// (docs/models.md#retnet, docs/models.md#verification): fixtures, chunk == recurrent with gradients, state passing, decode.
#include <cmath>

#include "runtime/retnet/retnet.h"
#include "tests/mixer_test_util.h"

using namespace mnemo;
using namespace mnemo::test;

namespace {

struct SgCase {
  torch::Tensor q, k, v, g, s0;
};

SgCase make_case(int64_t T, int64_t B = 2, int64_t H = 2, int64_t K = 8, int64_t V = 12) {
  return {randn_f64({B, T, H, K}), randn_f64({B, T, H, K}), randn_f64({B, T, H, V}),
          torch::log_sigmoid(randn_f64({B, T, H}) + 2.0), randn_f64({B, H, K, V})};
}

}  // namespace

TEST_CASE("simple_gla and retention kernels match the fla fixtures", "[linear1][retnet][fixtures]") {
  CHECK(check_op_fixtures("simple_gla") == 3);
  CHECK(check_op_fixtures("retention") == 3);
}

TEST_CASE("retnet log-decays are ln(1 - 2^(-5-h))", "[linear1][retnet]") {
  auto g = retnet_log_decay(3, torch::TensorOptions().dtype(torch::kFloat64));
  REQUIRE(g.size(0) == 3);
  CHECK(std::exp(g[0].item<double>()) == Approx(0.96875).epsilon(1e-15));
  CHECK(std::exp(g[1].item<double>()) == Approx(0.984375).epsilon(1e-15));
  CHECK(std::exp(g[2].item<double>()) == Approx(1.0 - 1.0 / 128).epsilon(1e-15));
}

TEST_CASE("simple_gla chunked == recurrent in fp64, outputs and gradients", "[linear1][retnet]") {
  torch::manual_seed(1);
  for (int64_t T : {1, 7, 63, 100}) {
    for (int64_t C : {16, 64}) {
      for (bool with_state : {false, true}) {
        INFO("T " << T << " C " << C << " state " << with_state);
        auto c = make_case(T);
        std::vector<torch::Tensor> inputs = {c.q, c.k, c.v, c.g};
        std::vector<std::string> names = {"q", "k", "v", "g", "initial_state"};
        if (with_state) inputs.push_back(c.s0);
        auto run = [&](bool chunked) -> KernelFn {
          return [=](const std::vector<torch::Tensor>& in) {
            torch::Tensor s0 = in.size() > 4 ? in[4] : torch::Tensor();
            auto r = chunked ? simple_gla_chunk(in[0], in[1], in[2], in[3], 0.4, s0, C)
                             : simple_gla_recurrent(in[0], in[1], in[2], in[3], 0.4, s0);
            return std::vector<torch::Tensor>{r.o, r.final_state};
          };
        };
        require_same_outputs_and_grads(run(false), run(true), inputs, names);
      }
    }
  }
}

TEST_CASE("retention chunked == recurrent, outputs and gradients", "[linear1][retnet]") {
  torch::manual_seed(2);
  for (int64_t T : {1, 63, 100}) {
    auto c = make_case(T, 2, 3);
    auto run = [&](bool chunked) -> KernelFn {
      return [=](const std::vector<torch::Tensor>& in) {
        auto r = chunked ? retention_chunk(in[0], in[1], in[2], 0.35, in[3], 16)
                         : retention_recurrent(in[0], in[1], in[2], 0.35, in[3]);
        return std::vector<torch::Tensor>{r.o, r.final_state};
      };
    };
    require_same_outputs_and_grads(run(false), run(true), {c.q, c.k, c.v, c.s0},
                                   {"q", "k", "v", "initial_state"});
  }
}

TEST_CASE("simple_gla state passing: one pass == two halves", "[linear1][retnet]") {
  torch::manual_seed(3);
  auto c = make_case(70);
  for (int64_t split : {1, 21, 32}) {
    INFO("split " << split);
    auto full = simple_gla_chunk(c.q, c.k, c.v, c.g, 0.4, c.s0, 16);
    auto first = simple_gla_chunk(c.q.slice(1, 0, split), c.k.slice(1, 0, split), c.v.slice(1, 0, split),
                                  c.g.slice(1, 0, split), 0.4, c.s0, 16);
    auto second = simple_gla_chunk(c.q.slice(1, split), c.k.slice(1, split), c.v.slice(1, split),
                                   c.g.slice(1, split), 0.4, first.final_state, 16);
    CHECK(max_rel_err(torch::cat({first.o, second.o}, 1), full.o) < 1e-12);
    CHECK(max_rel_err(second.final_state, full.final_state) < 1e-12);
  }
}

TEST_CASE("simple_gla chunk form stays finite under strong decay", "[linear1][retnet]") {
  // Per-step log-decay -40: in-chunk cumulative sums reach -2560, exp(+2560) would overflow.
  torch::manual_seed(4);
  auto c = make_case(64);
  auto g = torch::full_like(c.g, -40.0);
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    auto r = simple_gla_chunk(c.q.to(dtype), c.k.to(dtype), c.v.to(dtype), g.to(dtype), 0.4, c.s0.to(dtype), 64);
    auto ref = simple_gla_recurrent(c.q, c.k, c.v, g, 0.4, c.s0);
    CHECK(torch::isfinite(r.o).all().item<bool>());
    CHECK(max_rel_err(r.o, ref.o) < (dtype == torch::kFloat64 ? 1e-12 : 1e-3));
  }
}

TEST_CASE("simple_gla: factorised and masked-difference decays both equal the recurrence, with gradients",
          "[linear1][retnet]") {
  // Per-step log decay -4 over a 64-token chunk: span 256, within fp64's factorisation limit (factors up
  // to e^256); -6: span 384, beyond it, so the masked-difference form runs.
  torch::manual_seed(5);
  for (double per_step : {-4.0, -6.0}) {
    INFO("log decay per step " << per_step);
    auto c = make_case(100);
    auto g = torch::full_like(c.g, per_step) + 0.1 * torch::rand_like(c.g);
    auto b = torch::cumsum(to_chunks(g, 64), -1);
    CHECK(decay_factorisable(b) == (per_step > -5.0));
    auto run = [&](bool chunked) -> KernelFn {
      return [=](const std::vector<torch::Tensor>& in) {
        auto r = chunked ? simple_gla_chunk(in[0], in[1], in[2], in[3], 0.4, in[4], 64)
                         : simple_gla_recurrent(in[0], in[1], in[2], in[3], 0.4, in[4]);
        return std::vector<torch::Tensor>{r.o, r.final_state};
      };
    };
    require_same_outputs_and_grads(run(false), run(true), {c.q, c.k, c.v, g, c.s0},
                                   {"q", "k", "v", "g", "initial_state"});
  }
}

TEST_CASE("retnet mixer: decode token by token == full forward", "[linear1][retnet][mixer]") {
  CHECK(mixer_decode_error("retnet", json::object(), torch::kFloat64) < 1e-10);
  CHECK(mixer_decode_error("retnet", {{"form", "recurrent"}}, torch::kFloat64) < 1e-10);
  CHECK(mixer_decode_error("retnet", {{"short_conv", true}, {"chunk_size", 3}, {"retnet_rope", false}},
                           torch::kFloat64) < 1e-10);
  CHECK(mixer_decode_error("retnet", json::object(), torch::kFloat32) < 2e-3);
}

TEST_CASE("retnet mixer: chunk form == recurrent form, bad args rejected", "[linear1][retnet][mixer]") {
  auto chunked = make_mixer("retnet", 32, 2, {{"chunk_size", 4}}, 11);
  auto recurrent = make_mixer("retnet", 32, 2, {{"form", "recurrent"}}, 11);
  auto x = randn_f64({2, 9, 32});
  CHECK(max_rel_err(chunked->forward(x, nullptr), recurrent->forward(x, nullptr)) < 1e-10);
  CHECK_THROWS_WITH(build_mixer("retnet", 32, 2, {{"chunk_size", 0}}, 1), Catch::Contains("chunk_size"));
  CHECK_THROWS_WITH(build_mixer("retnet", 32, 2, {{"expand_k", 0.03125}}, 1), Catch::Contains("expand_k"));
}
