// MoM (docs/models.md#mom, docs/models.md#verification): one memory, top-1, no shared memory == Gated DeltaNet with the same
// weights; router (ties to the lower index, renormalised weights); load-balancing loss minimal for
// uniform routing with a gradient reaching the router; batch rows independent (ragged dispatch);
// routed-stream conv resets; chunk == recurrent; prefill + decode == full forward (mixer and models).
#include <catch2/catch.hpp>

#include "runtime/delta_rule/delta_rule.h"
#include "runtime/kernels/kernel_counts.h"
#include "runtime/model.h"
#include "runtime/mom/mom.h"
#include "runtime/registry.h"
#include "tests/test_util.h"
#include "tests/mixer_test_util.h"

using mnemo::test::make_mixer;
using mnemo::test::prefill_decode;

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace {

const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);

}  // namespace

TEST_CASE("mom: one memory, top-1, no shared memory equals Gated DeltaNet with the same weights", "[mom]") {
  torch::manual_seed(1);
  auto mom = make_mixer("mom", 16, 2, {{"num_memories", 1}, {"topk", 1}, {"shared_mem", false}, {"chunk_size", 4}});
  auto gdn = make_mixer("gated_deltanet", 16, 2, {{"expand_v", 1.0}, {"chunk_size", 4}});
  auto src = gdn->named_parameters(), dst = mom->named_parameters();
  const std::vector<std::pair<std::string, std::string>> map = {
      {"q_proj.proj.weight", "q_proj.weight"}, {"k_proj.proj.weight", "k_proj.weight"},
      {"v_proj.proj.weight", "v_proj.weight"}, {"q_proj.conv.weight", "conv_q.weight"},
      {"k_proj.conv.weight", "conv_k.weight"}, {"v_proj.conv.weight", "conv_v.weight"},
      {"b_proj.weight", "b_proj.weight"},     {"b_proj.bias", "b_proj.bias"},
      {"a_proj.weight", "a_proj.weight"},     {"A_log", "A_log"},
      {"dt_bias", "dt_bias"},                 {"output.gate_proj.weight", "output.gate_proj.weight"},
      {"output.out_proj.weight", "output.out_proj.weight"}, {"output.norm.weight", "output.norm.weight"}};
  {
    torch::NoGradGuard ng;
    for (const auto& kv : map) {
      CAPTURE(kv.first);
      REQUIRE(src.contains(kv.first));
      REQUIRE(dst.contains(kv.second));
      dst[kv.second].copy_(src[kv.first]);
    }
  }
  REQUIRE(dst.size() == map.size() + 1);  // + the router
  auto x = torch::randn({2, 11, 16}, f64);
  torch::NoGradGuard ng;
  const double err = max_rel_err(mom->forward(x, nullptr), gdn->forward(x, nullptr));
  WARN("mom(E=1, k=1, no shared) vs gated_deltanet: " << err);
  CHECK(err <= 1e-12);
}

TEST_CASE("mom router: ties to the lower index, renormalised weights, aux loss minimal when uniform, reaches W_g",
          "[mom]") {
  // ties: equal logits select memories 0 and 1
  auto r = mom_route(torch::zeros({1, 3, 4}, f64), 2);
  CHECK(r.idx.select(-1, 0).eq(0).all().item<bool>());
  CHECK(r.idx.select(-1, 1).eq(1).all().item<bool>());
  CHECK(max_rel_err(r.w, torch::full({1, 3, 2}, 0.5, f64)) <= 1e-15);
  auto z = torch::tensor({3.0, 1.0, 2.0, 1.0}, f64).view({1, 1, 4});
  auto r2 = mom_route(z, 2);
  CHECK(r2.idx.view({-1}).equal(torch::tensor({0, 2}, torch::kLong)));
  CHECK(std::abs(r2.w.sum().item<double>() - 1.0) <= 1e-15);
  CHECK(std::abs(mom_balance_loss(r.p, r.idx).item<double>() - 2.0) <= 1e-12);  // uniform: = k
  // skewed routing costs more; random routers never go below the uniform value
  torch::manual_seed(2);
  for (int i = 0; i < 5; ++i) {
    auto rr = mom_route(2.0 * torch::randn({2, 16, 4}, f64), 2);
    CHECK(mom_balance_loss(rr.p, rr.idx).item<double>() > 2.0);
  }
  // through the mixer: aux = 0.01 · k with a zero router; the gradient reaches the router weight
  auto m = make_mixer("mom", 16, 2, {{"num_memories", 4}, {"topk", 2}});
  auto params = m->named_parameters();
  {
    torch::NoGradGuard ng;
    params["router.weight"].zero_();
  }
  auto x = torch::randn({2, 9, 16}, f64);
  m->forward(x, nullptr);
  CHECK(std::abs(m->aux_loss().item<double>() - 0.02) <= 1e-14);
  {
    torch::NoGradGuard ng;
    params["router.weight"].normal_(0, 1.0);
  }
  m->forward(x, nullptr);
  auto aux = m->aux_loss();
  CHECK(aux.item<double>() > 0.02);
  auto grad = torch::autograd::grad({aux}, {params["router.weight"]})[0];
  CHECK(grad.abs().max().item<double>() > 0);
}

TEST_CASE("mom: chunk == recurrent, batch rows independent, prefill + decode == full forward (fp64)", "[mom]") {
  for (bool shared : {true, false}) {
    CAPTURE(shared);
    torch::manual_seed(3);
    json args = {{"num_memories", 4}, {"topk", 2}, {"shared_mem", shared}, {"chunk_size", 4}};
    auto m = make_mixer("mom", 16, 2, args);
    {
      torch::NoGradGuard ng;
      m->named_parameters()["router.weight"].normal_(0, 1.0);  // uneven routing, ragged streams
    }
    auto x = torch::randn({3, 14, 16}, f64);
    torch::NoGradGuard ng;
    auto full = m->forward(x, nullptr);
    CHECK(torch::isfinite(full).all().item<bool>());
    for (int64_t b = 0; b < 3; ++b) CHECK(max_rel_err(m->forward(x.narrow(0, b, 1), nullptr), full.narrow(0, b, 1)) <= 1e-12);
    for (int64_t p : {0, 1, 7}) {
      CAPTURE(p);
      CHECK(max_rel_err(prefill_decode(*m, x, p), full) <= 1e-10);
    }
    args["form"] = "recurrent";
    auto rec = make_mixer("mom", 16, 2, args);
    auto src = m->named_parameters(), dst = rec->named_parameters();
    for (const auto& kv : src) dst[kv.key()].copy_(kv.value());
    CHECK(max_rel_err(rec->forward(x, nullptr), full) <= 1e-10);
    // conv resets at the routed-stream start: a token's memory output does not depend on tokens routed elsewhere
  }
  for (const std::string model : {"mom", "mom_hybrid"}) {
    auto cfg = model_config_from_json({{"model", model}, {"vocab_size", 32}, {"d_model", 16},
                                       {"n_layers", model == "mom" ? 2 : 8}, {"n_heads", 2}, {"chunk_size", 4}});
    torch::manual_seed(5);
    LanguageModel lm(cfg);
    lm->to(torch::kFloat64);
    if (model == "mom_hybrid") CHECK(cfg.layer_mixers()[7] == "transformer");
    auto ids = torch::randint(0, 32, {2, 12}, torch::kLong);
    torch::NoGradGuard ng;
    auto full = lm->forward(ids);
    CHECK(lm->aux_loss().defined());
    ModelState st;
    std::vector<torch::Tensor> pieces = {lm->forward(ids.narrow(1, 0, 5), &st)};
    for (int64_t t = 5; t < 12; ++t) pieces.push_back(lm->forward(ids.narrow(1, t, 1), &st));
    const double err = max_rel_err(torch::cat(pieces, 1), full);
    WARN(model << " model prefill+decode vs full: " << err);
    CHECK(err <= 1e-10);
  }
}

TEST_CASE("mom: the memories on the delta rule's fused kernels (host grid) == the eager chunk form (fp64: outputs, "
          "prefill states, every parameter's gradient)",
          "[mom]") {
  // The route a GPU takes, over the host grid: ragged routed streams padded with inert rows.
  for (bool shared : {true, false}) {
    CAPTURE(shared);
    torch::manual_seed(4);
    json args = {{"num_memories", 4}, {"topk", 2}, {"shared_mem", shared}, {"chunk_size", 4}};
    auto eager = make_mixer("mom", 16, 2, args), fused = make_mixer("mom", 16, 2, args);
    {
      torch::NoGradGuard ng;
      eager->named_parameters()["router.weight"].normal_(0, 1.0);
      auto src = eager->named_parameters(), dst = fused->named_parameters();
      for (const auto& kv : src) dst[kv.key()].copy_(kv.value());
    }
    auto x = torch::randn({3, 14, 16}, f64);
    auto w = torch::randn({3, 14, 16}, f64);
    auto grads = [&](Mixer& m, const torch::Tensor& y) {
      m.zero_grad();
      (y * w).sum().backward();
      std::vector<torch::Tensor> g;
      for (const auto& p : m.parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
      return g;
    };
    auto y_ref = eager->forward(x, nullptr);
    auto g_ref = grads(*eager, y_ref);
    LayerState s_ref;
    eager->forward(x.detach(), &s_ref);

    reset_kernel_pass_counts();
    const DeltaRuleKernelHostScope on_host;
    auto y = fused->forward(x, nullptr);
    auto g = grads(*fused, y);
    CHECK(kernel_pass_counts().count("delta_rule forward (host grid, fp64 products)") == 1);
    CHECK(kernel_pass_counts().count("delta_rule backward (host grid, fp64 products)") == 1);
    CHECK(max_rel_err(y, y_ref) <= 1e-12);
    REQUIRE(g.size() == g_ref.size());
    for (size_t i = 0; i < g.size(); ++i) {
      CAPTURE(i);
      CHECK(max_rel_err(g[i], g_ref[i], 1e-8) <= 1e-10);
    }
    LayerState s;
    fused->forward(x.detach(), &s);
    for (const auto& [key, t] : s_ref.tensors) {
      CAPTURE(key);
      REQUIRE(s.has(key));
      CHECK(max_rel_err(s.at(key), t) <= 1e-12);
    }
  }
}

TEST_CASE("mom: stream conv resets at the start of a routed stream and carries its cache", "[mom]") {
  torch::manual_seed(4);
  auto w = torch::randn({3, 1, 4}, f64);
  auto x = torch::randn({2, 6, 3}, f64);
  auto lens = torch::tensor({6, 4}, torch::kLong);
  auto full = stream_conv(x, lens, w, torch::Tensor());
  // row 1 has 4 valid tokens: its outputs equal a conv over those 4 tokens alone, zero history
  auto solo = stream_conv(x.narrow(0, 1, 1).narrow(1, 0, 4), torch::tensor({4}, torch::kLong), w, torch::Tensor());
  CHECK(max_rel_err(full.first.narrow(0, 1, 1).narrow(1, 0, 4), solo.first) <= 1e-15);
  CHECK(max_rel_err(full.second.narrow(0, 1, 1), solo.second) <= 1e-15);
  // two pieces with the carried cache == one pass
  auto a = stream_conv(x.narrow(1, 0, 2), torch::tensor({2, 2}, torch::kLong), w, torch::Tensor());
  auto b = stream_conv(x.narrow(1, 2, 4), torch::tensor({4, 2}, torch::kLong), w, a.second);
  CHECK(max_rel_err(b.first.narrow(0, 0, 1), full.first.narrow(0, 0, 1).narrow(1, 2, 4)) <= 1e-15);
  CHECK(max_rel_err(b.first.narrow(0, 1, 1).narrow(1, 0, 2), full.first.narrow(0, 1, 1).narrow(1, 2, 2)) <= 1e-15);
  CHECK(max_rel_err(b.second, full.second) <= 1e-15);
}
