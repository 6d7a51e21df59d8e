// Linear attention kernels and mixer (docs/models.md#linear-attention, docs/models.md#verification): fixtures, chunk == recurrent
// with gradients, state passing, mixer decode == forward.
#include "runtime/linear_attn/linear_attn.h"
#include "tests/mixer_test_util.h"

using namespace mnemo;
using namespace mnemo::test;

namespace {

struct LaCase {
  torch::Tensor q, k, v, s0, z0;
};

// Positive q, k (elu + 1) when normalising, as the fixture's feature map.
LaCase make_case(int64_t T, bool normalize, int64_t B = 2, int64_t H = 2, int64_t K = 8, int64_t V = 12) {
  LaCase c{randn_f64({B, T, H, K}), randn_f64({B, T, H, K}), randn_f64({B, T, H, V}), randn_f64({B, H, K, V}), {}};
  if (normalize) {
    c.q = torch::elu(c.q) + 1.0;
    c.k = torch::elu(c.k) + 1.0;
    c.z0 = torch::rand({B, H, K}, torch::kFloat64) + 0.5;
  }
  return c;
}

}  // namespace

TEST_CASE("linear_attn kernels match the fla fixtures", "[linear1][linear_attn][fixtures]") {
  CHECK(check_op_fixtures("linear_attn") == 3);
  CHECK(check_op_fixtures("linear_attn_norm") == 3);
}

TEST_CASE("linear_attn chunked == recurrent in fp64, outputs and gradients", "[linear1][linear_attn]") {
  torch::manual_seed(1);
  for (bool normalize : {false, true}) {
    for (int64_t T : {1, 7, 63, 100}) {
      for (int64_t C : {16, 64}) {
        for (bool with_state : {false, true}) {
          INFO("normalize " << normalize << " T " << T << " C " << C << " state " << with_state);
          auto c = make_case(T, normalize);
          const double scale = 1.0 / std::sqrt(8.0);
          std::vector<torch::Tensor> inputs = {c.q, c.k, c.v};
          std::vector<std::string> names = {"q", "k", "v"};
          if (with_state) {
            inputs.push_back(c.s0);
            names.push_back("initial_state");
            if (normalize) {
              inputs.push_back(c.z0);
              names.push_back("initial_z");
            }
          }
          auto run = [&](bool chunked) -> KernelFn {
            return [=](const std::vector<torch::Tensor>& in) {
              torch::Tensor s0 = in.size() > 3 ? in[3] : torch::Tensor();
              torch::Tensor z0 = in.size() > 4 ? in[4] : torch::Tensor();
              auto r = chunked ? linear_attn_chunk(in[0], in[1], in[2], scale, s0, C, normalize, z0)
                               : linear_attn_recurrent(in[0], in[1], in[2], scale, s0, normalize, z0);
              std::vector<torch::Tensor> out = {r.o, r.final_state};
              if (normalize) out.push_back(r.final_z);
              return out;
            };
          };
          require_same_outputs_and_grads(run(false), run(true), inputs, names);
        }
      }
    }
  }
}

TEST_CASE("linear_attn state passing: one pass == two halves", "[linear1][linear_attn]") {
  torch::manual_seed(2);
  for (bool normalize : {false, true}) {
    auto c = make_case(50, normalize);
    const int64_t split = 21;  // inside a chunk of 16
    auto full = linear_attn_chunk(c.q, c.k, c.v, 0.3, c.s0, 16, normalize, c.z0);
    auto first = linear_attn_chunk(c.q.slice(1, 0, split), c.k.slice(1, 0, split), c.v.slice(1, 0, split),
                                   0.3, c.s0, 16, normalize, c.z0);
    auto second = linear_attn_recurrent(c.q.slice(1, split), c.k.slice(1, split), c.v.slice(1, split), 0.3,
                                        first.final_state, normalize, first.final_z);
    CHECK(max_rel_err(torch::cat({first.o, second.o}, 1), full.o) < 1e-12);
    CHECK(max_rel_err(second.final_state, full.final_state) < 1e-12);
    if (normalize) CHECK(max_rel_err(second.final_z, full.final_z) < 1e-12);
  }
}

TEST_CASE("linear_attn kernels run fp32 recurrences for fp32 inputs", "[linear1][linear_attn]") {
  torch::manual_seed(3);
  auto c = make_case(40, false);
  auto ref = linear_attn_recurrent(c.q, c.k, c.v, 0.35, c.s0);
  auto r = linear_attn_chunk(c.q.to(torch::kFloat32), c.k.to(torch::kFloat32), c.v.to(torch::kFloat32), 0.35,
                             c.s0.to(torch::kFloat32), 16);
  CHECK(r.o.scalar_type() == torch::kFloat32);
  CHECK(r.final_state.scalar_type() == torch::kFloat32);
  CHECK(max_rel_err(r.o, ref.o) < 1e-5);
  CHECK(max_rel_err(r.final_state, ref.final_state) < 1e-5);
}

TEST_CASE("linear_attn kernels reject bad shapes with a clear error", "[linear1][linear_attn]") {
  auto c = make_case(5, false);
  CHECK_THROWS_WITH(linear_attn_chunk(c.q, c.k.slice(1, 0, 4), c.v, 1.0),
                    Catch::Contains("'k'") && Catch::Contains("[2,5,2,8]"));
  CHECK_THROWS_AS(linear_attn_recurrent(c.q, c.k, c.v, 1.0, c.s0.slice(2, 0, 3)), Error);
  CHECK_THROWS_WITH(linear_attn_chunk(c.q, c.k, c.v, 1.0, {}, 0), Catch::Contains("chunk_size"));
}

TEST_CASE("linear_attn mixer: decode token by token == full forward", "[linear1][linear_attn][mixer]") {
  CHECK(mixer_decode_error("linear_attn", json::object(), torch::kFloat64) < 1e-10);
  CHECK(mixer_decode_error("linear_attn", {{"form", "recurrent"}}, torch::kFloat64) < 1e-10);
  CHECK(mixer_decode_error("linear_attn", {{"la_normalize", true}, {"chunk_size", 3}}, torch::kFloat64) < 1e-10);
  CHECK(mixer_decode_error("linear_attn", {{"short_conv", false}, {"expand_v", 2.0}}, torch::kFloat64) < 1e-10);
  CHECK(mixer_decode_error("linear_attn", json::object(), torch::kFloat32) < 2e-3);
  CHECK(mixer_decode_error("linear_attn_elu", json::object(), torch::kFloat64) < 1e-10);  // Katharopoulos defaults
}

TEST_CASE("linear_attn mixer: chunk form == recurrent form, bad args rejected", "[linear1][linear_attn][mixer]") {
  auto chunked = make_mixer("linear_attn", 32, 2, {{"chunk_size", 4}}, 11);
  auto recurrent = make_mixer("linear_attn", 32, 2, {{"form", "recurrent"}}, 11);
  auto x = randn_f64({2, 9, 32});
  CHECK(max_rel_err(chunked->forward(x, nullptr), recurrent->forward(x, nullptr)) < 1e-10);
  CHECK_THROWS_WITH(build_mixer("linear_attn", 32, 2, {{"form", "parallel"}}, 1), Catch::Contains("form"));
  CHECK_THROWS_WITH(build_mixer("linear_attn", 32, 2, {{"expand_k", 0.3}}, 1), Catch::Contains("expand_k"));
}

TEST_CASE("chunk_matmul equals torch::matmul for every operand layout, and keeps autograd", "[linear1]") {
  torch::manual_seed(7);
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    INFO("dtype " << dtype);
    auto opts = torch::TensorOptions().dtype(dtype);
    auto a = torch::randn({2, 3, 5, 7}, opts), b = torch::randn({2, 3, 7, 4}, opts);
    auto at = torch::randn({2, 3, 7, 5}, opts).transpose(-1, -2);  // transposed contiguous stack
    auto bt = torch::randn({2, 3, 4, 7}, opts).transpose(-1, -2);
    auto a_sel = torch::randn({2, 3, 6, 5, 7}, opts).select(2, 4);  // strided batch dims
    const double tol = dtype == torch::kFloat64 ? 1e-13 : 1e-5;
    torch::NoGradGuard no_grad;
    for (auto [x, y] : std::vector<std::pair<torch::Tensor, torch::Tensor>>{
             {a, b}, {at, b}, {a, bt}, {at, bt}, {a_sel, b}, {a.flatten(0, 1), b.flatten(0, 1)}}) {
      auto got = chunk_matmul(x, y), want = torch::matmul(x, y);
      REQUIRE(got.sizes() == want.sizes());
      CHECK((got - want).abs().max().item<double>() < tol);
    }
  }
  // Under autograd it is torch::matmul: gradients flow.
  auto a = torch::randn({2, 5, 3}, torch::kFloat64).requires_grad_(true);
  auto b = torch::randn({2, 3, 4}, torch::kFloat64);
  auto out = chunk_matmul(a, b);
  REQUIRE(out.requires_grad());
  out.sum().backward();
  CHECK(max_rel_err(a.grad(), b.sum(-1).unsqueeze(1).expand({2, 5, 3})) < 1e-14);
}
