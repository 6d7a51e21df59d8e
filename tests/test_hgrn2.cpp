// HGRN2 (docs/models.md#hgrn2): the layer spelled out token by token in fp64, and the layer-wise lower bounds that the
// model's first hgrn2 layer hands to the others. The GLA recurrence it runs on is proven chunk == recurrent in
// tests/test_gla.cpp; causality, decode == forward and gradients are in the mixer contract
// (tests/test_mixer_contract.cpp); fla's own logits in tests/test_fla_models.cpp.
#include <catch2/catch.hpp>

#include "runtime/registry.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace {

constexpr int64_t kB = 2, kT = 9, kD = 16, kH = 2, kDh = kD / kH;

// The layer by its equations (runtime/hgrn2/mixer.cpp), one token at a time; gamma [d] or undefined (no bound).
torch::Tensor hgrn2_by_hand(const torch::OrderedDict<std::string, torch::Tensor>& p, const torch::Tensor& x,
                            const torch::Tensor& gamma) {
  auto lin = [&](const char* name) { return torch::matmul(x, p[std::string(name) + ".weight"].t()); };
  auto q = torch::silu(lin("q_proj")).view({kB, kT, kH, kDh});
  auto g = torch::sigmoid(lin("f_proj"));
  if (gamma.defined()) g = gamma + (1 - gamma) * g;
  auto k = (1 - g).view({kB, kT, kH, kDh});
  g = g.view({kB, kT, kH, kDh});
  auto v = lin("i_proj").view({kB, kT, kH, kDh});
  auto S = torch::zeros({kB, kH, kDh, kDh}, torch::kFloat64);
  std::vector<torch::Tensor> out;
  for (int64_t t = 0; t < kT; ++t) {
    // S_t = Diag(g_t) S_{t-1} + k_tᵀ v_t,  o_t = (q_t / √d_h) S_t
    S = g.select(1, t).unsqueeze(-1) * S + k.select(1, t).unsqueeze(-1) * v.select(1, t).unsqueeze(-2);
    out.push_back(torch::matmul(q.select(1, t).unsqueeze(-2), S).squeeze(-2) / std::sqrt(double(kDh)));
  }
  auto o = torch::stack(out, 1).reshape({kB, kT, kD});
  o = o / torch::sqrt(o.pow(2).mean(-1, true) + 1e-5) * p["g_norm.weight"];
  return torch::matmul(o, p["o_proj.weight"].t());
}

std::shared_ptr<Mixer> hgrn2_layer(int64_t layer, int64_t n_layers, std::shared_ptr<ModelScratch> scratch, bool first,
                                   const json& args = json::object()) {
  const auto& fam = Registry::instance().mixer("hgrn2");
  MixerContext ctx;
  ctx.d_model = kD;
  ctx.n_heads = kH;
  ctx.layer_index = layer;
  ctx.n_layers = n_layers;
  ctx.args = fam.defaults;
  ctx.args.update(args);
  ctx.scratch = std::move(scratch);
  ctx.first_layer_of_mixer = first;
  torch::manual_seed(11 + layer);
  auto m = fam.make(ctx);
  m->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;  // norm weights away from 1
    m->named_parameters()["g_norm.weight"].copy_(1 + 0.3 * torch::randn({kD}, torch::kFloat64));
  }
  return m;
}

}  // namespace

TEST_CASE("hgrn2: the layer spelled out token by token in fp64 (chunk and recurrent forms)", "[hgrn2]") {
  auto x = torch::randn({kB, kT, kD}, torch::kFloat64);
  for (const std::string form : {"chunk", "recurrent"}) {
    DYNAMIC_SECTION(form) {
      auto m = hgrn2_layer(0, 1, nullptr, true, {{"form", form}, {"chunk_size", 4}});
      CHECK_FALSE(m->named_parameters().contains("lower_bounds"));  // on its own: layer 0, no bound
      CHECK(max_rel_err(m->forward(x, nullptr), hgrn2_by_hand(m->named_parameters(), x, {})) <= 1e-12);
    }
  }
}

TEST_CASE("hgrn2: layer l's forget gate is at least gamma_l = sum_{m<=l} softmax(P)_m - softmax(P)_0, P held by the "
          "first hgrn2 layer", "[hgrn2]") {
  constexpr int64_t L = 3;
  auto scratch = std::make_shared<ModelScratch>();
  auto first = hgrn2_layer(0, L, scratch, true), third = hgrn2_layer(2, L, scratch, false);
  REQUIRE(first->named_parameters().contains("lower_bounds"));
  auto P = first->named_parameters()["lower_bounds"];
  CHECK(P.sizes() == torch::IntArrayRef({L, kD}));
  CHECK(P.abs().max().item<double>() == 0.0);  // fla's init: zeros, so gamma_l = l / L
  CHECK_FALSE(third->named_parameters().contains("lower_bounds"));
  {
    torch::NoGradGuard no_grad;
    P.copy_(torch::randn({L, kD}, torch::kFloat64));
  }
  auto x = torch::randn({kB, kT, kD}, torch::kFloat64);
  CHECK(max_rel_err(first->forward(x, nullptr), hgrn2_by_hand(first->named_parameters(), x, {})) <= 1e-12);  // γ_0 = 0
  auto y = third->forward(x, nullptr);  // reads γ_2 from the scratch the first layer filled
  auto s = torch::softmax(P.detach(), 0);
  auto gamma = s[1] + s[2];
  CHECK(max_rel_err(y, hgrn2_by_hand(third->named_parameters(), x, gamma)) <= 1e-12);
  // The bounds learn from the layers that use them.
  y.sum().backward();
  REQUIRE(P.grad().defined());
  CHECK(P.grad().abs().max().item<double>() > 0);
  // A later layer without the first one's forward has no bounds to read: refused, naming the layer.
  auto alone = hgrn2_layer(1, L, std::make_shared<ModelScratch>(), false);
  CHECK_THROWS_WITH(alone->forward(x, nullptr), Catch::Contains("first hgrn2 layer") && Catch::Contains("layer 1"));
}
