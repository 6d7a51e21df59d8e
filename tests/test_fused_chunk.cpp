// The fused deep-memory chunk (runtime/deep_memory/fused_chunk.h: one autograd node, hand-written backward) against
// autograd through the op-by-op chunk forms, in fp64: outputs, end state and the gradient of every input.
// Titans: a state entered mid-chunk (anchor != weights, carried momentum) and the inner-gradient clip.
// Every form of the node: the CPU form (fused CPU kernels on, the default), the tensor form (off) and the CUDA
// kernel's block code over the host grid (DeepMemoryKernelHostScope; runtime/deep_memory/chunk_kernel.cuh).
// Omega (DLA/SWLA/OmegaNet): window terms, feature map, ℓ2 and dot loss, a state entered mid-chunk.
#include <catch2/catch.hpp>

#include "runtime/deep_memory/fused_chunk.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/titans/titans.h"
#include "tests/atlas_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace {

const auto fp64 = torch::TensorOptions().dtype(torch::kFloat64);

struct Case {
  std::vector<torch::Tensor> leaves;  // q k v lk le th w0 w1 s0 s1 a0 a1
  TitansMemoryState init;
};

Case make_case(const DeepMemorySpec& spec, int64_t B, int64_t T, int64_t H, int64_t offset, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t d = spec.d_in;
  auto leaf = [](torch::Tensor t) { return t.detach().requires_grad_(); };
  Case c;
  c.leaves = {leaf(l2norm(torch::randn({B, T, H, d}, fp64))), leaf(l2norm(torch::randn({B, T, H, d}, fp64))),
              leaf(torch::randn({B, T, H, d}, fp64)),
              leaf(torch::log_sigmoid(-(torch::randn({B, T, H}, fp64) - 2.0))),
              leaf(torch::log_sigmoid(torch::randn({B, T, H}, fp64) + 1.0)), leaf(0.3 * torch::rand({B, T, H}, fp64))};
  for (int part = 0; part < 3; ++part)  // weights, momentum, anchor
    for (const auto& sh : spec.weight_shapes())
      c.leaves.push_back(leaf((part == 1 ? 0.05 : 0.4) * torch::randn({B, H, sh[0], sh[1]}, fp64)));
  c.init.w = {c.leaves[6], c.leaves[7]};
  c.init.s = {c.leaves[8], c.leaves[9]};
  c.init.anchor = {c.leaves[10], c.leaves[11]};
  c.init.offset = offset;
  return c;
}

struct Run {
  torch::Tensor y;
  TitansMemoryState state;
  std::vector<torch::Tensor> grads;
};

Run run(const DeepMemorySpec& spec, const Case& c, int64_t b, double clip, bool fused) {
  const auto& x = c.leaves;
  auto r = fused ? titans_lmm_chunk(spec, x[0], x[1], x[2], x[3], x[4], x[5], c.init, b, clip)
                 : titans_lmm_chunk_composed(spec, x[0], x[1], x[2], x[3], x[4], x[5], c.init, b, clip);
  torch::manual_seed(99);  // the same loss weights in every dtype
  auto weights = [](const torch::Tensor& like) { return torch::randn(like.sizes(), fp64).to(like.device(), like.scalar_type()); };
  auto loss = (r.y * weights(r.y)).sum();
  for (const auto* ws : {&r.state.w, &r.state.s, &r.state.anchor})
    for (const auto& w : *ws) loss = loss + (w * weights(w)).sum();
  return {r.y.detach(), r.state, torch::autograd::grad({loss}, x, {}, false, false, /*allow_unused=*/true)};
}

}  // namespace

TEST_CASE("fused chunk, Titans: hand-written backward equals autograd through the composed form (fp64)",
          "[titans][fused]") {
  DeepMemorySpec spec;
  spec.kind = MemoryKind::ResidualMLP;
  spec.d_in = spec.d_out = 4;
  spec.expansion = 4;
  REQUIRE(fused_chunk_supported(spec));
  const char* names[] = {"q", "k", "v", "log_keep", "log_eta", "theta", "w0", "w1", "s0", "s1", "anchor0", "anchor1"};
  for (int form : {0, 1, 2})  // the node's CPU form (fused_chunk_cpu.cpp), its tensor form, its kernel (host grid)
  for (double clip : {0.0, 0.5}) {
    for (int64_t offset : {0, 3}) {
      for (int64_t T : {1, 13}) {  // b = 5: partial first (offset 3) and last chunks
        const int64_t b = 5;
        CAPTURE(form, clip, offset, T);
        const FusedCpuScope scope(form == 0);
        const DeepMemoryKernelHostScope kernel_scope(form == 2);
        auto c = make_case(spec, 2, T, 3, offset, 7 + T + offset);
        auto ref = run(spec, c, b, clip, false);
        auto got = run(spec, c, b, clip, true);
        CHECK(max_rel_err(got.y, ref.y) <= 1e-11);
        for (size_t l = 0; l < 2; ++l) {
          CHECK(max_rel_err(got.state.w[l], ref.state.w[l]) <= 1e-11);
          CHECK(max_rel_err(got.state.s[l], ref.state.s[l]) <= 1e-11);
          CHECK(max_rel_err(got.state.anchor[l], ref.state.anchor[l]) <= 1e-11);
        }
        CHECK(got.state.offset == ref.state.offset);
        for (size_t i = 0; i < ref.grads.size(); ++i) {
          CAPTURE(names[i]);
          REQUIRE(got.grads[i].defined() == ref.grads[i].defined());
          if (ref.grads[i].defined()) CHECK(max_rel_err(got.grads[i], ref.grads[i]) <= 1e-9);
        }
      }
    }
  }
  // The other memory kinds run the composed form.
  for (auto kind : {MemoryKind::Linear, MemoryKind::ResidualMLP_LN, MemoryKind::GatedMLP}) {
    DeepMemorySpec other = spec;
    other.kind = kind;
    CHECK_FALSE(fused_chunk_supported(other));
  }
}

TEST_CASE("fused chunk, Omega GD: hand-written backward equals autograd through the composed form (fp64)",
          "[atlas][fused]") {
  namespace at_ = mnemo::test::atlas;
  const int64_t B = 2, H = 2, d = 3, T = 13, split = 6;
  auto spec = at_::spec_of(MemoryKind::ResidualMLP, d, 2 * d);
  for (int form : {0, 1, 2})  // the node's CPU form, its tensor form, its kernel (host grid)
  for (const char* loss : {"l2", "dot"}) {
    for (int64_t window : {1, 3}) {
      CAPTURE(form, loss, window);
      const FusedCpuScope scope(form == 0);
      const DeepMemoryKernelHostScope kernel_scope(form == 2);
      auto in = at_::kernel_inputs(spec, B, T, H, false, 40 + window);
      OmegaOptions opt;
      opt.loss = loss;
      opt.window = window;
      opt.chunk = 4;
      // Two calls, the second entering mid-chunk (offset 2, anchor != weights, a carried window buffer).
      auto run = [&](bool fused) {
        auto form = fused ? omega_chunk : omega_chunk_composed;
        OmegaState init;
        init.w = in.w0;
        auto first = form(spec, opt, at_::omega_inputs(in, true, 0, split), init);
        auto second = form(spec, opt, at_::omega_inputs(in, true, split), first.state);
        torch::manual_seed(5);
        auto y = torch::cat({first.y, second.y}, 1);
        auto l = (y * torch::randn(y.sizes(), at_::f64)).sum();
        for (const auto& w : second.state.w) l = l + (w * torch::randn(w.sizes(), at_::f64)).sum();
        return std::make_tuple(y.detach(), second.state, torch::autograd::grad({l}, at_::leaves(in)));
      };
      auto [y_ref, st_ref, g_ref] = run(false);
      auto [y_got, st_got, g_got] = run(true);
      CHECK(st_ref.offset == (T % 4));
      CHECK(max_rel_err(y_got, y_ref) <= 1e-11);
      for (size_t l = 0; l < 2; ++l) {
        CHECK(max_rel_err(st_got.w[l], st_ref.w[l]) <= 1e-11);
        CHECK(max_rel_err(st_got.anchor[l], st_ref.anchor[l]) <= 1e-11);
      }
      for (size_t i = 0; i < g_ref.size(); ++i) {
        CAPTURE(i);
        CHECK(max_rel_err(g_got[i], g_ref[i]) <= 1e-9);
      }
    }
  }
}
