// Hope (docs/models.md#hope): the self-modifying Titans' chunk form equals its token-by-token form in fp64 (outputs,
// both memory states, every input gradient), across chunk sizes, offsets into a chunk and carried states; the
// MLP memories (smt_memory "mlp") likewise and their one-token step against autograd; the Continuum Memory System
// level likewise, its in-context step equals autograd's gradient of the chunk's loss, and its
// weights change at chunk boundaries only; a Hope model decodes token by token exactly as its full forward; bad
// inputs are refused by name. The mixer's causality, decode == forward and gradients are in the mixer contract
// (tests/test_mixer_contract.cpp).
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/config/run_config.h"
#include "runtime/hope/hope.h"
#include "runtime/layers.h"
#include "runtime/model.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace {

struct HopeSmtInputs {
  torch::Tensor x_key, x_value, q, init, start, running;
  SmtGates gates;
  std::vector<torch::Tensor> leaves() const {
    std::vector<torch::Tensor> out = {x_key, x_value, q, init, gates.w_eta, gates.b_eta, gates.w_alpha, gates.b_alpha};
    if (start.defined()) out.insert(out.end(), {start, running});
    return out;
  }
};

HopeSmtInputs make_smt_inputs(int64_t B, int64_t T, int64_t H, int64_t d, bool with_state, uint64_t seed) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  HopeSmtInputs in;
  in.x_key = torch::randn({B, T, H, d}, o).requires_grad_();
  in.x_value = torch::randn({B, T, H, d}, o).requires_grad_();
  in.q = l2norm(torch::randn({B, T, H, d}, o)).detach().requires_grad_();
  in.init = (0.2 * torch::randn({kSmtMemories, H, d, d}, o)).requires_grad_();
  in.gates.w_eta = (0.5 * torch::randn({H, d}, o)).requires_grad_();
  in.gates.b_eta = torch::randn({H}, o).requires_grad_();
  in.gates.w_alpha = (0.5 * torch::randn({H, d}, o)).requires_grad_();
  in.gates.b_alpha = (2.0 + torch::randn({H}, o)).detach().requires_grad_();
  in.gates.eta_max = 0.5;
  if (with_state) {
    in.start = (0.3 * torch::randn({B, kSmtMemories, H, d, d}, o)).requires_grad_();
    in.running = (in.start + 0.1 * torch::randn({B, kSmtMemories, H, d, d}, o)).detach().requires_grad_();
  }
  return in;
}

struct SmtRun {
  torch::Tensor o, start, running;
  std::vector<torch::Tensor> grads;
};

// Outputs, states and the gradients of a fixed random functional of all three w.r.t. every input.
SmtRun run_smt(const HopeSmtInputs& in, bool chunked, int64_t C, int64_t offset) {
  auto r = chunked ? smt_chunk(in.x_key, in.x_value, in.q, in.init, in.gates, in.start, in.running, C, offset)
                   : smt_recurrent(in.x_key, in.x_value, in.q, in.init, in.gates, in.start, in.running, C, offset);
  torch::manual_seed(99);
  auto loss = (r.o * torch::randn(r.o.sizes(), r.o.options())).sum() +
              (r.chunk_start * torch::randn(r.chunk_start.sizes(), r.o.options())).sum() +
              (r.running * torch::randn(r.running.sizes(), r.o.options())).sum();
  return {r.o.detach(), r.chunk_start.detach(), r.running.detach(),
          torch::autograd::grad({loss}, in.leaves(), {}, /*retain_graph=*/false, false, /*allow_unused=*/true)};
}

struct CmsInputs {
  torch::Tensor x, v, eta, w1, w2;
  CmsLevelState state;
  std::vector<torch::Tensor> leaves() const {
    std::vector<torch::Tensor> out = {x, v, eta, w1, w2};
    if (state.w1.defined()) out.insert(out.end(), {state.w1, state.w2, state.p1, state.p2});
    return out;
  }
};

CmsInputs make_cms_inputs(int64_t B, int64_t T, int64_t d, int64_t h, bool with_state, uint64_t seed) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  CmsInputs in;
  // Inputs of RMSNorm's scale over d channels and steps small enough for one token's step (C = 1) to be stable.
  in.x = (torch::randn({B, T, d}, o) / std::sqrt(static_cast<double>(d))).requires_grad_();
  in.v = (torch::randn({B, T, d}, o) / std::sqrt(static_cast<double>(d))).requires_grad_();
  in.eta = (0.5 * torch::sigmoid(torch::randn({B, T}, o))).requires_grad_();
  in.w1 = (0.3 * torch::randn({h, d}, o)).requires_grad_();
  in.w2 = (0.3 * torch::randn({d, h}, o)).requires_grad_();
  if (with_state) {
    in.state = {(0.3 * torch::randn({B, h, d}, o)).requires_grad_(), (0.3 * torch::randn({B, d, h}, o)).requires_grad_(),
                (0.05 * torch::randn({B, h, d}, o)).requires_grad_(), (0.05 * torch::randn({B, d, h}, o)).requires_grad_()};
  }
  return in;
}

struct CmsRun {
  torch::Tensor y, w1, w2, p1, p2;
  std::vector<torch::Tensor> grads;
};

CmsRun run_cms(const CmsInputs& in, bool chunked, int64_t C, int64_t offset) {
  auto r = chunked ? cms_level_chunk(in.x, in.v, in.eta, in.w1, in.w2, in.state, C, offset)
                   : cms_level_recurrent(in.x, in.v, in.eta, in.w1, in.w2, in.state, C, offset);
  torch::manual_seed(77);
  auto loss = (r.y * torch::randn(r.y.sizes(), r.y.options())).sum();
  CmsRun out{r.y.detach()};
  if (r.state.w1.defined()) {
    for (const auto& s : {r.state.w1, r.state.w2, r.state.p1, r.state.p2})
      loss = loss + (s * torch::randn(s.sizes(), s.options())).sum();
    out.w1 = r.state.w1.detach();
    out.w2 = r.state.w2.detach();
    out.p1 = r.state.p1.detach();
    out.p2 = r.state.p2.detach();
  }
  out.grads = torch::autograd::grad({loss}, in.leaves(), {}, false, false, /*allow_unused=*/true);
  return out;
}

void check_grads_equal(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& ref) {
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got[i].defined() == ref[i].defined());
    if (ref[i].defined()) CHECK(max_rel_err(got[i], ref[i], 1e-8) <= 1e-9);
  }
}

// MLP memories: the same inputs, init W1 [5, H, h, d] small (non-zero, so that W2's gradient is non-zero) and W2.
struct HopeMlpInputs {
  HopeSmtInputs base;
  SmtMlpMemories init, start, running;
  std::vector<torch::Tensor> leaves() const {
    std::vector<torch::Tensor> out = {base.x_key, base.x_value, base.q, init.w1, init.w2,
                                      base.gates.w_eta, base.gates.b_eta, base.gates.w_alpha, base.gates.b_alpha};
    if (start.w1.defined()) out.insert(out.end(), {start.w1, start.w2, running.w1, running.w2});
    return out;
  }
};

HopeMlpInputs make_mlp_inputs(int64_t B, int64_t T, int64_t H, int64_t d, int64_t h, bool with_state, uint64_t seed) {
  HopeMlpInputs in;
  in.base = make_smt_inputs(B, T, H, d, false, seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  in.init.w1 = (0.3 * torch::randn({kSmtMemories, H, h, d}, o)).requires_grad_();
  in.init.w2 = (0.5 * torch::randn({kSmtMemories, H, d, h}, o)).requires_grad_();
  if (with_state) {
    in.start.w1 = (0.3 * torch::randn({B, kSmtMemories, H, h, d}, o)).requires_grad_();
    in.start.w2 = (0.5 * torch::randn({B, kSmtMemories, H, d, h}, o)).requires_grad_();
    in.running.w1 = (in.start.w1 + 0.1 * torch::randn_like(in.start.w1)).detach().requires_grad_();
    in.running.w2 = (in.start.w2 + 0.1 * torch::randn_like(in.start.w2)).detach().requires_grad_();
  }
  return in;
}

struct SmtMlpRun {
  torch::Tensor o;
  SmtMlpMemories start, running;
  std::vector<torch::Tensor> grads;
};

SmtMlpRun run_smt_mlp(const HopeMlpInputs& in, bool chunked, int64_t C, int64_t offset) {
  const auto& b = in.base;
  auto r = chunked ? smt_mlp_chunk(b.x_key, b.x_value, b.q, in.init, b.gates, in.start, in.running, C, offset)
                   : smt_mlp_recurrent(b.x_key, b.x_value, b.q, in.init, b.gates, in.start, in.running, C, offset);
  torch::manual_seed(98);
  auto loss = (r.o * torch::randn(r.o.sizes(), r.o.options())).sum();
  for (const auto& t : {r.chunk_start.w1, r.chunk_start.w2, r.running.w1, r.running.w2})
    loss = loss + (t * torch::randn(t.sizes(), t.options())).sum();
  return {r.o.detach(),
          {r.chunk_start.w1.detach(), r.chunk_start.w2.detach()},
          {r.running.w1.detach(), r.running.w2.detach()},
          torch::autograd::grad({loss}, in.leaves(), {}, false, false, /*allow_unused=*/true)};
}

}  // namespace

TEST_CASE("self-modifying Titans: chunk form equals the token-by-token form in fp64", "[hope][smt]") {
  for (int64_t C : {1, 4, 16})
    for (int64_t T : {1, 7, 16, 37})
      for (int64_t offset : {0, 3})
        for (bool with_state : {false, true}) {
          CAPTURE(C, T, offset, with_state);
          auto in = make_smt_inputs(2, T, 2, 5, with_state, 10 + C + T);
          auto ref = run_smt(in, false, C, offset), got = run_smt(in, true, C, offset);
          CHECK(max_rel_err(got.o, ref.o) <= 1e-11);
          CHECK(max_rel_err(got.start, ref.start) <= 1e-11);
          CHECK(max_rel_err(got.running, ref.running) <= 1e-11);
          check_grads_equal(got.grads, ref.grads);
        }
}

TEST_CASE("self-modifying Titans: a retention gate past fp32's range (z_alpha = -200) stays finite, and the forms agree",
          "[hope][smt]") {
  auto in64 = make_smt_inputs(2, 19, 2, 5, true, 71);
  in64.gates.b_alpha = torch::full({2}, -200.0, torch::kFloat64).requires_grad_();  // σ(z) underflows in fp32
  // fp32: every output, state and gradient finite (log α = log σ(z) floored, so β = η/α and Σ log α stay finite).
  HopeSmtInputs in32;
  auto f32 = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat32).requires_grad_(); };
  in32.x_key = f32(in64.x_key), in32.x_value = f32(in64.x_value), in32.q = f32(in64.q), in32.init = f32(in64.init);
  in32.start = f32(in64.start), in32.running = f32(in64.running);
  in32.gates = {f32(in64.gates.w_eta), f32(in64.gates.b_eta), f32(in64.gates.w_alpha), f32(in64.gates.b_alpha),
                in64.gates.eta_max};
  for (bool chunked : {true, false}) {
    CAPTURE(chunked);
    auto r = run_smt(in32, chunked, 8, 3);
    CHECK(torch::isfinite(r.o).all().item<bool>());
    CHECK(torch::isfinite(r.running).all().item<bool>());
    for (const auto& g : r.grads)
      if (g.defined()) CHECK(torch::isfinite(g).all().item<bool>());
  }
  // fp64: the chunk form equals the token-by-token form with the floor binding.
  auto ref = run_smt(in64, false, 8, 3), got = run_smt(in64, true, 8, 3);
  CHECK(max_rel_err(got.o, ref.o) <= 1e-11);
  CHECK(max_rel_err(got.running, ref.running) <= 1e-11);
  check_grads_equal(got.grads, ref.grads);
}

TEST_CASE("self-modifying Titans: a split run with the carried states equals one run", "[hope][smt]") {
  auto in = make_smt_inputs(2, 29, 2, 4, false, 5);
  for (bool chunked : {false, true}) {
    CAPTURE(chunked);
    auto whole = run_smt(in, chunked, 8, 0);
    auto first = smt_chunk(in.x_key.narrow(1, 0, 11), in.x_value.narrow(1, 0, 11), in.q.narrow(1, 0, 11), in.init,
                           in.gates, {}, {}, 8, 0);
    auto a = in.x_key.narrow(1, 11, 18), b = in.x_value.narrow(1, 11, 18), q = in.q.narrow(1, 11, 18);
    auto second = chunked ? smt_chunk(a, b, q, in.init, in.gates, first.chunk_start, first.running, 8, 11)
                          : smt_recurrent(a, b, q, in.init, in.gates, first.chunk_start, first.running, 8, 11);
    CHECK(max_rel_err(torch::cat({first.o, second.o}, 1).detach(), whole.o) <= 1e-11);
    CHECK(max_rel_err(second.chunk_start.detach(), whole.start) <= 1e-11);
    CHECK(max_rel_err(second.running.detach(), whole.running) <= 1e-11);
  }
}

TEST_CASE("self-modifying Titans: reads inside a chunk use the chunk's start state", "[hope][smt]") {
  // With C = T every output reads the initial memories: o_t = q_t + q_t S_mem^0 whatever x is.
  auto in = make_smt_inputs(1, 9, 2, 4, false, 8);
  auto r = smt_recurrent(in.x_key, in.x_value, in.q, in.init, in.gates, {}, {}, 9, 0);
  auto expected = in.q + torch::matmul(in.q.transpose(1, 2), in.init.select(0, kSmtMemory)).transpose(1, 2);
  CHECK(max_rel_err(r.o.detach(), expected.detach()) <= 1e-12);
  // The chunk's end moved the memories; the next chunk's reads see it.
  CHECK(max_rel_err(r.chunk_start.detach(), in.init.unsqueeze(0).expand_as(r.chunk_start).detach()) > 1e-3);
}

TEST_CASE("self-modifying Titans with MLP memories: chunk form equals the token-by-token form in fp64, and a split run "
          "with the carried weights equals one run", "[hope][smt]") {
  for (int64_t C : {1, 4, 16})
    for (int64_t T : {1, 7, 37})
      for (int64_t offset : {0, 3})
        for (bool with_state : {false, true}) {
          CAPTURE(C, T, offset, with_state);
          auto in = make_mlp_inputs(2, T, 2, 5, 3, with_state, 20 + C + T);
          auto ref = run_smt_mlp(in, false, C, offset), got = run_smt_mlp(in, true, C, offset);
          CHECK(max_rel_err(got.o, ref.o) <= 1e-11);
          CHECK(max_rel_err(got.start.w1, ref.start.w1) <= 1e-11);
          CHECK(max_rel_err(got.start.w2, ref.start.w2) <= 1e-11);
          CHECK(max_rel_err(got.running.w1, ref.running.w1) <= 1e-11);
          CHECK(max_rel_err(got.running.w2, ref.running.w2) <= 1e-11);
          check_grads_equal(got.grads, ref.grads);
        }
  auto in = make_mlp_inputs(2, 29, 2, 4, 6, false, 6);
  const auto& b = in.base;
  for (bool chunked : {false, true}) {
    CAPTURE(chunked);
    auto whole = run_smt_mlp(in, chunked, 8, 0);
    auto first = smt_mlp_chunk(b.x_key.narrow(1, 0, 11), b.x_value.narrow(1, 0, 11), b.q.narrow(1, 0, 11), in.init,
                               b.gates, {}, {}, 8, 0);
    auto x = b.x_key.narrow(1, 11, 18), y = b.x_value.narrow(1, 11, 18), q = b.q.narrow(1, 11, 18);
    auto second = chunked ? smt_mlp_chunk(x, y, q, in.init, b.gates, first.chunk_start, first.running, 8, 11)
                          : smt_mlp_recurrent(x, y, q, in.init, b.gates, first.chunk_start, first.running, 8, 11);
    CHECK(max_rel_err(torch::cat({first.o, second.o}, 1).detach(), whole.o) <= 1e-11);
    CHECK(max_rel_err(second.running.w1.detach(), whole.running.w1) <= 1e-11);
    CHECK(max_rel_err(second.running.w2.detach(), whole.running.w2) <= 1e-11);
  }
}

TEST_CASE("self-modifying Titans with MLP memories: one token's step is retention plus the normalised gradient of "
          "the memory's loss at the chunk start (autograd)", "[hope][smt]") {
  // C = 2, T = 1: the running weights after the token, W' = α W − η / (1 + ‖∇ℓ‖²/‖e‖²) ∇_W ℓ, ℓ = ½‖M(k) − M(v)‖², with k, v,
  // η, α read from the initial weights, against autograd's gradient of that loss.
  auto in = make_mlp_inputs(1, 1, 2, 4, 3, false, 31);
  const auto& b = in.base;
  auto r = smt_mlp_recurrent(b.x_key, b.x_value, b.q, in.init, b.gates, {}, {}, 2, 0);
  for (int64_t m = 0; m < kSmtMemories; ++m)
    for (int64_t head = 0; head < 2; ++head) {
      CAPTURE(m, head);
      auto W1 = in.init.w1.detach()[m][head].clone().requires_grad_(), W2 = in.init.w2.detach()[m][head].clone().requires_grad_();
      // The token's k, v, η, α as the kernel read them (the same reads through the key/value memories).
      auto read = [&](int64_t mem, const torch::Tensor& x) {
        return x + torch::matmul(torch::silu(torch::matmul(x, in.init.w2.detach()[mem][head])), in.init.w1.detach()[mem][head]);
      };
      auto a = b.x_key.detach()[0][0][head], bv = b.x_value.detach()[0][0][head];
      auto k = l2norm(read(kSmtKey, a)), v = l2norm(read(kSmtValue, bv));
      auto eta = b.gates.eta_max * torch::sigmoid((read(kSmtEta, a) * b.gates.w_eta.detach()[head]).sum() +
                                                  b.gates.b_eta.detach()[head]);
      auto alpha = torch::sigmoid((read(kSmtAlpha, a) * b.gates.w_alpha.detach()[head]).sum() + b.gates.b_alpha.detach()[head]);
      auto M = [&](const torch::Tensor& x) { return x + torch::matmul(torch::silu(torch::matmul(x, W2)), W1); };
      auto target = M(v).detach();  // the self-generated value is a target, not differentiated through
      auto loss = 0.5 * (M(k) - target).pow(2).sum();
      auto g = torch::autograd::grad({loss}, {W1, W2});
      // One normaliser for the memory: 1 + ‖∇ℓ‖² / ‖e‖² (normalised LMS).
      auto e2 = (2 * loss).detach();
      auto step = eta / (1 + (g[0].pow(2).sum() + g[1].pow(2).sum()) / e2);
      auto expect_w1 = alpha * in.init.w1.detach()[m][head] - step * g[0];
      auto expect_w2 = alpha * in.init.w2.detach()[m][head] - step * g[1];
      CHECK(max_rel_err(r.running.w1.detach()[0][m][head], expect_w1) <= 1e-12);
      CHECK(max_rel_err(r.running.w2.detach()[0][m][head], expect_w2) <= 1e-12);
    }
  // Inside the chunk the start weights did not move.
  CHECK(max_rel_err(r.chunk_start.w1.detach()[0], in.init.w1.detach()) == 0);
}

TEST_CASE("self-modifying Titans layer with MLP memories: causal, decode equals forward, gradients reach every "
          "parameter", "[hope][smt][contract]") {
  const json args = {{"smt_memory", "mlp"}, {"smt_memory_hidden", 6}, {"chunk_size", 4}};
  auto m = mnemo::test::make_mixer("self_modifying_titans", 16, 2, args, 5);
  mnemo::test::require_layer_contract(*m, 16, [](const LayerState& state) {
    CHECK(state.tensors.at("smt_running_w1").sizes() == torch::IntArrayRef({2, kSmtMemories, 2, 6, 8}));
  });
  CHECK(m->named_parameters().contains("init_w1"));
  CHECK_FALSE(m->named_parameters().contains("init_memories"));
}

TEST_CASE("continuum memory level: chunk form equals the token-by-token form in fp64", "[hope][cms]") {
  for (int64_t C : {0, 1, 3, 8})
    for (int64_t T : {1, 5, 17})
      for (int64_t offset : {0, 2})
        for (bool with_state : {false, true}) {
          if (C == 0 && with_state) continue;  // a level that never changes has no state
          CAPTURE(C, T, offset, with_state);
          auto in = make_cms_inputs(2, T, 6, 5, with_state, 20 + C + T);
          auto ref = run_cms(in, false, C, offset), got = run_cms(in, true, C, offset);
          CHECK(max_rel_err(got.y, ref.y) <= 1e-11);
          if (C > 0) {
            CHECK(max_rel_err(got.w1, ref.w1) <= 1e-11);
            CHECK(max_rel_err(got.w2, ref.w2) <= 1e-11);
            CHECK(max_rel_err(got.p1, ref.p1, 1e-8) <= 1e-10);
            CHECK(max_rel_err(got.p2, ref.p2, 1e-8) <= 1e-10);
          }
          check_grads_equal(got.grads, ref.grads);
        }
}

TEST_CASE("continuum memory level: the chunk's step is normalised gradient descent on the chunk's loss at its start",
          "[hope][cms]") {
  const int64_t C = 6;
  auto in = make_cms_inputs(2, C, 4, 3, false, 3);
  auto r = cms_level_recurrent(in.x, in.v, in.eta, in.w1, in.w2, {}, C, 0);
  // The independent reference: autograd's gradient of each token's ½‖x_t + SiLU(x_t W2) W1 − v_t‖², per batch row,
  // weighted by η_t / C over 1 + the squared norm of the layer's input (SiLU(x_t W2) for W1, x_t for W2).
  for (int64_t b = 0; b < 2; ++b) {
    auto step1 = torch::zeros_like(in.w1), step2 = torch::zeros_like(in.w2);
    for (int64_t t = 0; t < C; ++t) {
      auto w1 = in.w1.detach().clone().requires_grad_(), w2 = in.w2.detach().clone().requires_grad_();
      auto x = in.x.detach()[b][t], v = in.v.detach()[b][t];
      const double eta = in.eta.detach()[b][t].item<double>();
      auto a = torch::silu(torch::matmul(x, w2));
      auto loss = 0.5 * (x + torch::matmul(a, w1) - v).pow(2).sum();
      auto g = torch::autograd::grad({loss}, {w1, w2});
      step1 += eta / C / (1 + a.detach().pow(2).sum().item<double>()) * g[0];
      step2 += eta / C / (1 + x.pow(2).sum().item<double>()) * g[1];
    }
    CHECK(max_rel_err(r.state.w1.detach()[b], (in.w1 - step1).detach()) <= 1e-12);
    CHECK(max_rel_err(r.state.w2.detach()[b], (in.w2 - step2).detach()) <= 1e-12);
  }
  CHECK(r.state.p1.abs().max().item<double>() == 0.0);  // the boundary applied and cleared the pending sums
  // Inside the first chunk every token reads θ^0: the same outputs as a level that never changes.
  auto frozen = cms_level_recurrent(in.x, in.v, in.eta, in.w1, in.w2, {}, 0, 0);
  CHECK(max_rel_err(r.y.detach(), frozen.y.detach()) <= 1e-14);
  // A longer sequence: tokens after the boundary read θ^1.
  auto in2 = make_cms_inputs(1, 2 * C, 4, 3, false, 4);
  auto moving = cms_level_chunk(in2.x, in2.v, in2.eta, in2.w1, in2.w2, {}, C, 0);
  auto still = cms_level_chunk(in2.x, in2.v, in2.eta, in2.w1, in2.w2, {}, 0, 0);
  CHECK(max_rel_err(moving.y.narrow(1, 0, C).detach(), still.y.narrow(1, 0, C).detach()) <= 1e-14);
  CHECK(max_rel_err(moving.y.narrow(1, C, C).detach(), still.y.narrow(1, C, C).detach()) > 1e-6);
}

TEST_CASE("hope model: token-by-token decoding equals the full forward in fp64", "[hope][model]") {
  // The family sets block_ffn "cms" itself; a run's resolved configuration carries it.
  json run = resolve_run_config({{"model", "hope"}, {"task", "mqar"}});
  REQUIRE(run.at("block_ffn") == "cms");
  json cfg = {{"model", "hope"}, {"vocab_size", 37}, {"d_model", 16}, {"n_layers", 2}, {"n_heads", 2},
              {"chunk_size", 4}, {"block_ffn", "cms"}, {"cms_chunk_sizes", {3, 0, 5}}};
  auto mc = model_config_from_json(cfg);
  torch::manual_seed(1);
  LanguageModel model(mc);
  model->to(torch::kFloat64);
  auto ids = torch::randint(37, {2, 13}, torch::kInt64);
  torch::NoGradGuard no_grad;
  auto full = model->forward(ids);
  ModelState state = model->initial_state();
  std::vector<torch::Tensor> steps;
  auto prefix = model->forward(ids.narrow(1, 0, 6), &state);  // a prefill that ends inside every chunk size
  steps.push_back(prefix);
  for (int64_t t = 6; t < 13; ++t) steps.push_back(model->forward(ids.narrow(1, t, 1), &state));
  CHECK(max_rel_err(torch::cat(steps, 1), full) <= 1e-10);
  // The same with MLP memories (smt_memory "mlp", hidden 6).
  cfg["smt_memory"] = "mlp";
  cfg["smt_memory_hidden"] = 6;
  torch::manual_seed(2);
  LanguageModel mlp_model(model_config_from_json(cfg));
  mlp_model->to(torch::kFloat64);
  auto mlp_full = mlp_model->forward(ids);
  ModelState mlp_state = mlp_model->initial_state();
  std::vector<torch::Tensor> mlp_steps = {mlp_model->forward(ids.narrow(1, 0, 6), &mlp_state)};
  for (int64_t t = 6; t < 13; ++t) mlp_steps.push_back(mlp_model->forward(ids.narrow(1, t, 1), &mlp_state));
  CHECK(max_rel_err(torch::cat(mlp_steps, 1), mlp_full) <= 1e-10);
}

TEST_CASE("hope: bad inputs are refused by name", "[hope]") {
  auto in = make_smt_inputs(1, 4, 2, 3, false, 1);
  CHECK_THROWS_WITH(smt_chunk(in.x_key, in.x_value, in.q.narrow(1, 0, 3), in.init, in.gates, {}, {}, 2, 0),
                    Catch::Contains("q must be"));
  CHECK_THROWS_WITH(smt_chunk(in.x_key, in.x_value.narrow(1, 0, 3), in.q, in.init, in.gates, {}, {}, 2, 0),
                    Catch::Contains("x_value must be"));
  CHECK_THROWS_WITH(smt_recurrent(in.x_key, in.x_value, in.q, in.init, in.gates, {}, {}, 0, 0),
                    Catch::Contains("chunk_size"));
  CHECK_THROWS_WITH(smt_chunk(in.x_key, in.x_value, in.q, in.init, in.gates, in.init, {}, 2, 0), Catch::Contains("both"));
  auto c = make_cms_inputs(1, 4, 3, 2, false, 1);
  CHECK_THROWS_WITH(cms_level_chunk(c.x, c.v, c.eta.narrow(1, 0, 2), c.w1, c.w2, {}, 2, 0),
                    Catch::Contains("eta must be"));
  CHECK_THROWS_WITH(model_config_from_json({{"model", "hope"}, {"block_ffn", "cms"}, {"cms_chunk_sizes", json::array()}}),
                    Catch::Contains("cms_chunk_sizes"));
  CHECK_THROWS_WITH(LanguageModel(model_config_from_json({{"model", "hope"}, {"smt_memory", "deep"}})),
                    Catch::Contains("smt_memory"));
  auto mlp = make_mlp_inputs(1, 4, 2, 3, 2, false, 1);
  CHECK_THROWS_WITH(smt_mlp_chunk(mlp.base.x_key, mlp.base.x_value, mlp.base.q, {mlp.init.w1, mlp.init.w1},
                                  mlp.base.gates, {}, {}, 2, 0),
                    Catch::Contains("init w2 must be"));
  CHECK_THROWS_WITH(model_config_from_json({{"model", "transformer"}, {"block_ffn", "moe"}}),
                    Catch::Contains("block_ffn"));
  CHECK_THROWS_WITH(model_config_from_json({{"model", "transformer"}, {"block_ffn", "cms"}, {"block_mlp", false}}),
                    Catch::Contains("block_mlp"));
}
