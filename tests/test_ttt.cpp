// TTT-Linear / TTT-MLP (docs/models.md#ttt, docs/models.md#deep-memory, docs/models.md#verification): fixture parity of the `ttt_linear` op,
// dual form == token-by-token reference (outputs, final state, all gradients), mini-batch 1 ==
// fully online update, TTT-Linear without LN at mini-batch 1 == delta rule, state carry across
// splits, prefill + decode == full forward, a short MQAR run that learns.
#include <catch2/catch.hpp>

#include "runtime/delta_rule/delta_rule.h"
#include "runtime/layers.h"
#include "runtime/ops/fixture.h"
#include "runtime/registry.h"
#include "engine/training/trainer.h"
#include "runtime/ttt/ttt.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"
#include "file_util.h"

using namespace mnemo;
using mnemo::test::build_mixer;
using mnemo::test::max_rel_err;

namespace {

struct TTTInputs {
  torch::Tensor q, k, v, row, col, ln_w, ln_b;
  TTTState st;
  std::vector<torch::Tensor> leaves() const {
    std::vector<torch::Tensor> out = {q, k, v, row, col, ln_w, ln_b};
    for (const auto& w : st.anchor.W) out.push_back(w);
    for (const auto& b : st.anchor.b) out.push_back(b);
    return out;
  }
};

// mlp_hidden == 0: linear inner model.
TTTInputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t D, int64_t mlp_hidden, uint64_t seed) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  TTTInputs in;
  in.q = torch::randn({B, T, H, D}, o).requires_grad_();
  in.k = l2norm(torch::randn({B, T, H, D}, o)).detach().requires_grad_();
  in.v = torch::randn({B, T, H, D}, o).requires_grad_();
  in.row = (0.1 * torch::rand({B, T, H}, o)).requires_grad_();
  in.col = (0.5 + torch::rand({B, T, H}, o)).requires_grad_();
  in.ln_w = (1.0 + 0.2 * torch::randn({H, D}, o)).requires_grad_();
  in.ln_b = (0.2 * torch::randn({H, D}, o)).requires_grad_();
  std::vector<int64_t> dims = {D};
  if (mlp_hidden > 0) dims.push_back(mlp_hidden);
  dims.push_back(D);
  for (size_t l = 0; l + 1 < dims.size(); ++l) {
    in.st.anchor.W.push_back((torch::randn({B, H, dims[l], dims[l + 1]}, o) / std::sqrt(double(dims[l]))).requires_grad_());
    in.st.anchor.b.push_back((0.3 * torch::randn({B, H, 1, dims[l + 1]}, o)).requires_grad_());
  }
  return in;
}

struct FormResult {
  torch::Tensor o;
  std::vector<torch::Tensor> state, grads;
};

FormResult run(const TTTInputs& in, bool dual, const TTTOptions& opt, bool grads = true) {
  auto r = dual ? ttt_chunk(in.q, in.k, in.v, in.row, in.col, in.ln_w, in.ln_b, in.st, opt)
                : ttt_recurrent(in.q, in.k, in.v, in.row, in.col, in.ln_w, in.ln_b, in.st, opt);
  FormResult f;
  f.o = r.o.detach();
  std::vector<torch::Tensor> st = r.final.W;
  st.insert(st.end(), r.final.b.begin(), r.final.b.end());
  if (!grads) {
    for (auto& s : st) f.state.push_back(s.detach());
    return f;
  }
  torch::manual_seed(99);
  auto loss = (r.o * torch::randn(r.o.sizes(), r.o.options())).sum();
  for (auto& s : st) {
    loss = loss + (s * torch::randn(s.sizes(), s.options())).sum();
    f.state.push_back(s.detach());
  }
  f.grads = torch::autograd::grad({loss}, in.leaves(), {}, false, false, /*allow_unused=*/true);
  return f;
}

const char* leaf_names[] = {"q", "k", "v", "row", "col", "ln_w", "ln_b", "W1", "W2", "b1", "b2"};

}  // namespace

TEST_CASE("ttt_linear op matches every fla fixture in fp64 (recurrent and dual forms)", "[ttt]") {
  auto& registry = KernelOpRegistry::instance();
  REQUIRE(registry.has("ttt_linear"));
  int64_t checked = 0;
  for (const auto& file : list_fixture_files(fixtures_dir())) {
    Fixture f = load_fixture(file);
    if (f.op != "ttt_linear") continue;
    for (const auto& check : check_fixture(f, registry.at(f.op), {16})) {
      std::string detail;
      for (const auto& o : check.outputs)
        detail += o.name + ": max_abs " + std::to_string(o.max_abs_err) + " atol " + std::to_string(o.atol) +
                  (o.pass ? " ok; " : " FAIL; ");
      CAPTURE(file, check.label(), check.error, detail);
      CHECK(check.pass());
      ++checked;
    }
  }
  CHECK(checked == 3 * 2);
}

TEST_CASE("ttt dual form equals the token-by-token reference in fp64 (outputs, state, gradients)", "[ttt]") {
  for (int64_t hidden : {0, 12}) {
    for (const std::string res : {"query", "inner"}) {
      for (int64_t T : {1, 13, 37}) {
        auto in = make_inputs(2, T, 2, 6, hidden, 100 + T);
        for (int64_t b : {1, 5, 16}) {
          if (b == 1 && T > 13) continue;
          TTTOptions opt;
          opt.mini_batch = b;
          opt.scale = 0.7;
          opt.output_residual = res;
          CAPTURE(hidden, res, T, b);
          auto ref = run(in, false, opt), got = run(in, true, opt);
          CHECK(max_rel_err(got.o, ref.o) <= 1e-10);
          for (size_t i = 0; i < ref.state.size(); ++i) CHECK(max_rel_err(got.state[i], ref.state[i]) <= 1e-10);
          REQUIRE(got.grads.size() == ref.grads.size());
          for (size_t i = 0; i < ref.grads.size(); ++i) {
            CAPTURE(i < 7 ? leaf_names[i] : "inner init", i);
            REQUIRE(ref.grads[i].defined());
            CHECK(max_rel_err(got.grads[i], ref.grads[i]) <= 1e-8);
          }
        }
      }
    }
  }
}

namespace {

// Independent fully online reference (mini-batch 1): W ← W - row_t col_t ∇ℓ_t(W) with ∇ by autograd, read f(q̃; W).
torch::Tensor online_autograd(const TTTInputs& in, const TTTOptions& opt) {
  torch::AutoGradMode enable_grad(true);
  const int64_t T = in.q.size(1);
  std::vector<torch::Tensor> W, b;
  for (auto& w : in.st.anchor.W) W.push_back(w.detach().clone());
  for (auto& x : in.st.anchor.b) b.push_back(x.detach().clone());
  auto lnw = in.ln_w.detach().unsqueeze(0).unsqueeze(2), lnb = in.ln_b.detach().unsqueeze(0).unsqueeze(2);
  auto f_res = [&](torch::Tensor x, const std::vector<torch::Tensor>& Ws, const std::vector<torch::Tensor>& bs) {
    for (size_t l = 0; l < Ws.size(); ++l) {
      x = torch::matmul(x, Ws[l]) + bs[l];
      if (l + 1 < Ws.size()) x = torch::gelu(x);
    }
    return x;
  };
  auto ln = [&](const torch::Tensor& u) {
    auto mu = u.mean(-1, true);
    return (u - mu) / torch::sqrt((u - mu).pow(2).mean(-1, true) + opt.eps) * lnw + lnb;
  };
  std::vector<torch::Tensor> outs;
  for (int64_t t = 0; t < T; ++t) {
    auto k = in.k.detach().narrow(1, t, 1).transpose(1, 2), v = in.v.detach().narrow(1, t, 1).transpose(1, 2);
    auto q = in.q.detach().narrow(1, t, 1).transpose(1, 2) * opt.scale;
    std::vector<torch::Tensor> leaves;
    for (auto& w : W) leaves.push_back(w.detach().requires_grad_());
    for (auto& x : b) leaves.push_back(x.detach().requires_grad_());
    std::vector<torch::Tensor> Wl(leaves.begin(), leaves.begin() + W.size()), bl(leaves.begin() + W.size(), leaves.end());
    auto loss = 0.5 * (ln(f_res(k, Wl, bl)) - (v - k)).pow(2).sum();
    auto g = torch::autograd::grad({loss}, leaves);
    auto step = (in.row.detach().narrow(1, t, 1) * in.col.detach().narrow(1, t, 1)).transpose(1, 2).unsqueeze(-1);
    for (size_t l = 0; l < W.size(); ++l) {
      W[l] = W[l] - step * g[l];
      b[l] = b[l] - step * g[W.size() + l];
    }
    auto z = f_res(q, W, b);
    outs.push_back(q + ln(z));
  }
  return torch::cat(outs, 2).transpose(1, 2);
}

}  // namespace

TEST_CASE("ttt mini-batch 1 equals the fully online update with autograd inner gradients", "[ttt]") {
  torch::NoGradGuard no_grad;
  for (int64_t hidden : {0, 12}) {
    auto in = make_inputs(2, 9, 2, 6, hidden, 7);
    TTTOptions opt;
    opt.mini_batch = 1;
    opt.scale = 0.8;
    CAPTURE(hidden);
    auto ref = online_autograd(in, opt);
    CHECK(max_rel_err(run(in, true, opt, false).o, ref) <= 1e-12);
    CHECK(max_rel_err(run(in, false, opt, false).o, ref) <= 1e-12);
  }
}

TEST_CASE("ttt_linear without inner LN at mini-batch 1 equals the delta rule", "[ttt]") {
  torch::NoGradGuard no_grad;
  auto in = make_inputs(2, 30, 2, 8, 0, 11);
  auto beta = torch::sigmoid(torch::randn({2, 30, 2}, torch::kFloat64));
  auto S0 = in.st.anchor.W[0].detach();
  TTTState st;
  st.anchor.W = {S0};  // no inner biases
  TTTOptions opt;
  opt.mini_batch = 1;
  opt.inner_ln = false;
  opt.skip = false;
  opt.output_residual = "none";
  opt.scale = 0.5;
  auto ones = torch::ones_like(beta);
  auto ref = delta_rule_recurrent(in.q, in.k, in.v, beta, {}, S0, 0.5);
  for (bool dual : {false, true}) {
    CAPTURE(dual);
    auto r = dual ? ttt_chunk(in.q, in.k, in.v, beta, ones, {}, {}, st, opt)
                  : ttt_recurrent(in.q, in.k, in.v, beta, ones, {}, {}, st, opt);
    CHECK(max_rel_err(r.o, ref.o) <= 1e-12);
    CHECK(max_rel_err(r.final.W[0], ref.final_state) <= 1e-12);
  }
}

TEST_CASE("ttt: two calls with the carried state equal one call (splits inside a mini-batch)", "[ttt]") {
  torch::NoGradGuard no_grad;
  for (int64_t hidden : {0, 12}) {
    auto in = make_inputs(1, 40, 2, 6, hidden, 3);
    TTTOptions opt;
    opt.mini_batch = 8;
    auto full = ttt_chunk(in.q, in.k, in.v, in.row, in.col, in.ln_w, in.ln_b, in.st, opt);
    for (int64_t split : {1, 13, 16, 39}) {
      for (bool dual : {false, true}) {
        CAPTURE(hidden, split, dual);
        auto part = [&](int64_t from, int64_t len, const TTTState& st) {
          auto s = [&](const torch::Tensor& t) { return t.narrow(1, from, len); };
          return dual ? ttt_chunk(s(in.q), s(in.k), s(in.v), s(in.row), s(in.col), in.ln_w, in.ln_b, st, opt)
                      : ttt_recurrent(s(in.q), s(in.k), s(in.v), s(in.row), s(in.col), in.ln_w, in.ln_b, st, opt);
        };
        auto a = part(0, split, in.st);
        auto b = part(split, 40 - split, a.carry);
        CHECK(max_rel_err(torch::cat({a.o, b.o}, 1), full.o) <= 1e-10);
        for (size_t l = 0; l < full.final.W.size(); ++l)
          CHECK(max_rel_err(b.final.W[l], full.final.W[l]) <= 1e-10);
      }
    }
  }
}

TEST_CASE("ttt_linear and ttt_mlp mixers: prefill + decode equals the full forward, forms agree (fp64)", "[ttt]") {
  for (const std::string family : {"ttt_linear", "ttt_mlp"}) {
    for (const std::string conv : {"ttt_lm", "fla"}) {
      CAPTURE(family, conv);
      torch::manual_seed(5);
      auto mixer = build_mixer(family, 16, 2, {{"mini_batch", 4}, {"eta_convention", conv}});
      mixer->to(torch::kFloat64);
      auto x = torch::randn({2, 19, 16}, torch::kFloat64);
      torch::NoGradGuard no_grad;
      auto full = mixer->forward(x, nullptr);
      REQUIRE(full.sizes() == x.sizes());
      LayerState state;
      std::vector<torch::Tensor> pieces = {mixer->forward(x.narrow(1, 0, 6), &state)};
      REQUIRE(state.has("ttt_W0"));
      const auto bytes = state.bytes();
      for (int64_t t = 6; t < 19; ++t) {
        pieces.push_back(mixer->forward(x.narrow(1, t, 1), &state));
        CHECK(state.bytes() == bytes);  // constant-size decode state
      }
      CHECK(max_rel_err(torch::cat(pieces, 1), full) <= 1e-10);
      auto rec = build_mixer(family, 16, 2, {{"mini_batch", 4}, {"eta_convention", conv}, {"form", "recurrent"}});
      rec->to(torch::kFloat64);
      auto src = mixer->named_parameters(), dst = rec->named_parameters();
      for (const auto& p : src) dst[p.key()].copy_(p.value());
      CHECK(max_rel_err(rec->forward(x, nullptr), full) <= 1e-10);
    }
  }
  auto m = build_mixer("ttt_mlp", 16, 2, json::object());
  CHECK(m->named_parameters()["memory_init_W1"].sizes() == torch::IntArrayRef({2, 8, 32}));
  CHECK_THROWS_WITH(build_mixer("ttt_linear", 16, 2, {{"mini_batch", 0}}), Catch::Contains("mini_batch"));
  CHECK_THROWS_WITH(build_mixer("ttt_linear", 16, 2, {{"eta_convention", "x"}}), Catch::Contains("eta_convention"));
}

TEST_CASE("ttt_linear learns a small MQAR task", "[ttt][train]") {
  auto dir = test::temp_dir("ttt_mqar");
  json cfg = {{"model", "ttt_linear"}, {"task", "mqar"}, {"vocab_size", 64}, {"seq_len", 32}, {"num_kv_pairs", 2},
              {"d_model", 32}, {"n_layers", 1}, {"n_heads", 2}, {"batch_size", 32}, {"n_train", 4000},
              {"n_test", 256}, {"lr", 3e-3}, {"steps", 150}, {"eval_every", 50}, {"device", "cpu"}};
  TrainOptions opt;
  opt.db_path = (dir / "r.sqlite").string();
  opt.out_dir = (dir / "run").string();
  opt.quiet = true;
  auto r = train(cfg, opt);
  WARN("ttt_linear MQAR (V=64, L=32, 2 pairs, d=32, 1 layer, 150 steps): best test acc " << r.best_test_accuracy
       << ", final train loss " << r.final_train_loss << ", " << r.tokens_per_s << " tok/s");
  CHECK(r.best_test_accuracy >= 0.2);  // chance is ~1/32 for the value tokens
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("ttt_gelu backward in fp32 is right for a non-contiguous incoming gradient", "[ttt]") {
  // LibTorch 1.13's CPU float gelu_backward is wrong when dy is a transposed view and h is contiguous.
  torch::manual_seed(4);
  auto h = torch::randn({3, 8, 8}).requires_grad_();
  auto dy = torch::randn({3, 8, 8}).transpose(-1, -2);
  auto dh = torch::autograd::grad({ttt_gelu(h)}, {h}, {dy})[0];
  CHECK(max_rel_err(dh, dy * ttt_gelu_grad(h.detach())) <= 1e-5);
}

TEST_CASE("ttt_mlp dual form gradients in fp32 match fp64 (mini-batch > 1)", "[ttt]") {
  auto in64 = make_inputs(2, 11, 2, 6, 12, 21);
  auto f32 = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat32).requires_grad_(); };
  TTTInputs in32;
  in32.q = f32(in64.q), in32.k = f32(in64.k), in32.v = f32(in64.v), in32.row = f32(in64.row);
  in32.col = f32(in64.col), in32.ln_w = f32(in64.ln_w), in32.ln_b = f32(in64.ln_b);
  for (const auto& w : in64.st.anchor.W) in32.st.anchor.W.push_back(f32(w));
  for (const auto& b : in64.st.anchor.b) in32.st.anchor.b.push_back(f32(b));
  auto probe = torch::randn(in64.q.sizes(), torch::kFloat64);
  TTTOptions opt;
  opt.mini_batch = 4;
  auto grads = [&](const TTTInputs& in, bool dual) {
    auto r = dual ? ttt_chunk(in.q, in.k, in.v, in.row, in.col, in.ln_w, in.ln_b, in.st, opt)
                  : ttt_recurrent(in.q, in.k, in.v, in.row, in.col, in.ln_w, in.ln_b, in.st, opt);
    return torch::autograd::grad({(r.o * probe.to(r.o.scalar_type())).sum()}, in.leaves());
  };
  for (bool dual : {true, false}) {
    auto ref = grads(in64, dual), got = grads(in32, dual);
    for (size_t i = 0; i < ref.size(); ++i) {
      CAPTURE(dual, i < 7 ? leaf_names[i] : "inner init", i);
      CHECK(max_rel_err(got[i].to(torch::kFloat64), ref[i]) <= 1e-4);
    }
  }
}

TEST_CASE("ttt_mlp fused mini-batch node: hand-written backward equals autograd through the composed form (fp64)",
          "[ttt][fused]") {
  for (const std::string res : {"query", "inner", "none"}) {
    for (bool skip : {true, false}) {
      auto in = make_inputs(2, 21, 2, 6, 12, 7);
      TTTOptions opt;
      opt.mini_batch = 8;
      opt.scale = 0.7;
      opt.output_residual = res;
      opt.skip = skip;
      CAPTURE(res, skip);
      REQUIRE(ttt_fused_chunk_supported(in.st.anchor, opt));
      auto go = [&](bool fused) {
        auto form = fused ? ttt_chunk : ttt_chunk_composed;
        auto r = form(in.q, in.k, in.v, in.row, in.col, in.ln_w, in.ln_b, in.st, opt);
        torch::manual_seed(3);
        auto loss = (r.o * torch::randn(r.o.sizes(), r.o.options())).sum();
        for (const auto* ws : {&r.carry.anchor.W, &r.carry.anchor.b, &r.carry.acc.W, &r.carry.acc.b})
          for (const auto& w : *ws) loss = loss + (w * torch::randn(w.sizes(), w.options())).sum();
        return std::make_pair(r.o.detach(),
                              torch::autograd::grad({loss}, in.leaves(), {}, false, false, /*allow_unused=*/true));
      };
      auto [o_ref, g_ref] = go(false);
      auto [o_got, g_got] = go(true);
      CHECK(max_rel_err(o_got, o_ref) <= 1e-11);
      for (size_t i = 0; i < g_ref.size(); ++i) {
        CAPTURE(leaf_names[i]);
        REQUIRE(g_ref[i].defined());
        CHECK(max_rel_err(g_got[i], g_ref[i]) <= 1e-9);
      }
    }
  }
  auto lin = make_inputs(1, 4, 1, 4, 0, 1);
  CHECK_FALSE(ttt_fused_chunk_supported(lin.st.anchor, TTTOptions{}));  // TTT-Linear: the composed form
}
