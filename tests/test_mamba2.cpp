// Mamba-2 SSD kernels and mixer (docs/models.md#mamba2, docs/models.md#numerical-stability, docs/models.md#verification): fixtures, chunk == recurrent
// with gradients, equivalence with simple GLA, the fused GLA kernel's host run, segsum, state passing, mixer decode ==
// forward.
#include <cmath>

#include "runtime/mamba2/mamba2.h"
#include "runtime/retnet/retnet.h"
#include "tests/mixer_test_util.h"

using namespace mnemo;
using namespace mnemo::test;

namespace {

struct SsdCase {
  torch::Tensor x, dt, A, B, C, s0;
};

// Fixture-like inputs: dt = softplus(N(0,1) − 2), A = −exp(U(0, ln 4)).
SsdCase make_case(int64_t T, int64_t Bn = 2, int64_t H = 2, int64_t P = 12, int64_t N = 8) {
  return {randn_f64({Bn, T, H, P}),
          torch::softplus(randn_f64({Bn, T, H}) - 2.0),
          -torch::exp(torch::rand({H}, torch::kFloat64) * std::log(4.0)),
          randn_f64({Bn, T, H, N}),
          randn_f64({Bn, T, H, N}),
          randn_f64({Bn, H, P, N})};
}

KernelFn ssd_fn(bool chunked, int64_t L) {
  return [=](const std::vector<torch::Tensor>& in) {
    torch::Tensor s0 = in.size() > 5 ? in[5] : torch::Tensor();
    auto r = chunked ? mamba2_ssd_chunk(in[0], in[1], in[2], in[3], in[4], s0, L)
                     : mamba2_ssd_recurrent(in[0], in[1], in[2], in[3], in[4], s0);
    return std::vector<torch::Tensor>{r.o, r.final_state};
  };
}

}  // namespace

TEST_CASE("mamba2_ssd kernels match the mamba_ssm fixtures", "[linear1][mamba2][fixtures]") {
  CHECK(check_op_fixtures("mamba2_ssd") == 3);
}

TEST_CASE("mamba2_ssd chunked == recurrent in fp64, outputs and gradients", "[linear1][mamba2]") {
  torch::manual_seed(1);
  const std::vector<std::string> names = {"x", "dt", "A", "B", "C", "initial_state"};
  for (int64_t T : {1, 7, 63, 100}) {
    for (int64_t L : {16, 64}) {
      for (bool with_state : {false, true}) {
        INFO("T " << T << " chunk " << L << " state " << with_state);
        auto c = make_case(T);
        std::vector<torch::Tensor> inputs = {c.x, c.dt, c.A, c.B, c.C};
        if (with_state) inputs.push_back(c.s0);
        require_same_outputs_and_grads(ssd_fn(false, 0), ssd_fn(true, L), inputs, names);
      }
    }
  }
}

TEST_CASE("mamba2_ssd equals simple GLA with q = C, k = B, v = dt x, g = A dt", "[linear1][mamba2]") {
  torch::manual_seed(2);
  auto c = make_case(37);
  auto ssd = mamba2_ssd_chunk(c.x, c.dt, c.A, c.B, c.C, c.s0, 16);
  auto sg = simple_gla_recurrent(c.C, c.B, c.x * c.dt.unsqueeze(-1), c.A.view({1, 1, -1}) * c.dt, 1.0,
                                 c.s0.transpose(-1, -2));
  CHECK(max_rel_err(ssd.o, sg.o) < 1e-12);
  CHECK(max_rel_err(ssd.final_state, sg.final_state.transpose(-1, -2)) < 1e-12);
}

TEST_CASE("ssd_segsum is the masked segment sum", "[linear1][mamba2]") {
  auto a = torch::tensor({-0.5, -1.0, -2.0, -0.25}, torch::kFloat64);
  auto s = ssd_segsum(a);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      const double v = s[i][j].item<double>();
      if (j > i) {
        CHECK(std::isinf(v));
        CHECK(v < 0);
      } else {
        CHECK(v == Approx(a.slice(0, j + 1, i + 1).sum().item<double>()).margin(1e-15));
      }
    }
  }
}

TEST_CASE("mamba2_ssd state passing: one pass == two halves", "[linear1][mamba2]") {
  torch::manual_seed(3);
  auto c = make_case(70);
  for (int64_t split : {1, 21, 32}) {
    INFO("split " << split);
    auto full = mamba2_ssd_chunk(c.x, c.dt, c.A, c.B, c.C, c.s0, 16);
    auto head = [&](const torch::Tensor& t) { return t.slice(1, 0, split); };
    auto tail = [&](const torch::Tensor& t) { return t.slice(1, split); };
    auto first = mamba2_ssd_chunk(head(c.x), head(c.dt), c.A, head(c.B), head(c.C), c.s0, 16);
    auto second = mamba2_ssd_chunk(tail(c.x), tail(c.dt), c.A, tail(c.B), tail(c.C), first.final_state, 16);
    CHECK(max_rel_err(torch::cat({first.o, second.o}, 1), full.o) < 1e-12);
    CHECK(max_rel_err(second.final_state, full.final_state) < 1e-12);
  }
}

TEST_CASE("mamba2_ssd chunk form stays finite under strong decay", "[linear1][mamba2]") {
  torch::manual_seed(4);
  auto c = make_case(64);
  auto dt = torch::full_like(c.dt, 10.0);  // A dt down to -40 per step
  auto ref = mamba2_ssd_recurrent(c.x, dt, c.A, c.B, c.C, c.s0);
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    auto r = mamba2_ssd_chunk(c.x.to(dtype), dt.to(dtype), c.A.to(dtype), c.B.to(dtype), c.C.to(dtype),
                              c.s0.to(dtype), 64);
    CHECK(torch::isfinite(r.o).all().item<bool>());
    CHECK(max_rel_err(r.o, ref.o) < (dtype == torch::kFloat64 ? 1e-12 : 1e-3));
  }
}

TEST_CASE("mamba2_ssd grouped chunk form, factorised and masked-difference decays, == recurrent with gradients",
          "[linear1][mamba2]") {
  // 4 heads sharing 2 B/C groups; dt scale 1 keeps the in-chunk decay span small (factorised form),
  // dt scale 60 pushes it past fp64's limit of 300 (masked differences).
  torch::manual_seed(5);
  const int64_t G = 2, H = 4;
  auto c = make_case(100, 2, H);
  auto Bg = randn_f64({2, 100, G, 8}), Cg = randn_f64({2, 100, G, 8});
  for (double dt_scale : {1.0, 60.0}) {
    INFO("dt scale " << dt_scale);
    auto dt = c.dt * dt_scale;
    auto a_cum = torch::cumsum(to_chunks(c.A.view({1, 1, -1}) * dt, 64), -1);
    CHECK(decay_factorisable(a_cum) == (dt_scale == 1.0));
    auto reference = [&](const std::vector<torch::Tensor>& in) {
      auto r = mamba2_ssd_recurrent(in[0], in[1], in[2], in[3].repeat_interleave(H / G, 2),
                                    in[4].repeat_interleave(H / G, 2), in[5]);
      return std::vector<torch::Tensor>{r.o, r.final_state};
    };
    auto chunked = [&](const std::vector<torch::Tensor>& in) {
      auto r = mamba2_ssd_chunk_grouped(in[0], in[1], in[2], in[3], in[4], in[5], 64);
      return std::vector<torch::Tensor>{r.o, r.final_state};
    };
    require_same_outputs_and_grads(reference, chunked, {c.x, dt, c.A, Bg, Cg, c.s0},
                                   {"x", "dt", "A", "B", "C", "initial_state"});
  }
}

TEST_CASE("mamba2_ssd through the fused GLA chunk kernel (host run) == recurrent and grouped chunk forms, fp64 and "
          "fp32, outputs, final state and every gradient, and packed sequences", "[linear1][mamba2][cuda-kernel]") {
  torch::manual_seed(9);
  const std::vector<std::string> names = {"x", "dt", "A", "B", "C", "initial_state"};
  const int64_t G = 2, H = 4;
  for (int64_t T : {1, 37, 100}) {
    for (double dt_scale : {1.0, 20.0}) {  // weak and strong in-chunk decay
      INFO("T " << T << " dt scale " << dt_scale);
      auto c = make_case(T, 2, H);
      auto Bg = randn_f64({2, T, G, 8}), Cg = randn_f64({2, T, G, 8});
      const std::vector<torch::Tensor> inputs = {c.x, c.dt * dt_scale, c.A, Bg, Cg, c.s0};
      KernelFn recurrent = [&](const std::vector<torch::Tensor>& in) {
        auto r = mamba2_ssd_recurrent(in[0], in[1], in[2], in[3].repeat_interleave(H / G, 2),
                                      in[4].repeat_interleave(H / G, 2), in[5]);
        return std::vector<torch::Tensor>{r.o, r.final_state};
      };
      KernelFn grouped = [&](const std::vector<torch::Tensor>& in) {
        auto r = mamba2_ssd_chunk_grouped(in[0], in[1], in[2], in[3], in[4], in[5], 16);
        return std::vector<torch::Tensor>{r.o, r.final_state};
      };
      KernelFn fused = [&](const std::vector<torch::Tensor>& in) {
        auto r = mamba2_ssd_chunk_fused(in[0], in[1], in[2], in[3], in[4], in[5], 16);
        return std::vector<torch::Tensor>{r.o, r.final_state};
      };
      require_same_outputs_and_grads(recurrent, fused, inputs, names);
      require_same_outputs_and_grads(grouped, fused, inputs, names);
      require_fp32_close(recurrent, fused, inputs, names, 1e-3);
    }
  }
  // Packed: three sequences in one row (cu_seqlens) == each through the recurrence from its own state.
  const std::vector<int64_t> lengths = {5, 40, 19};
  auto cu = torch::tensor({0, 5, 45, 64}, torch::kInt32);
  auto c = make_case(64, 1, H);
  auto Bg = randn_f64({1, 64, G, 8}), Cg = randn_f64({1, 64, G, 8}), s0 = randn_f64({3, H, 12, 8});
  KernelFn per_sequence = [&](const std::vector<torch::Tensor>& in) {
    std::vector<torch::Tensor> outs, finals;
    int64_t start = 0;
    for (size_t n = 0; n < lengths.size(); ++n) {
      auto part = [&](const torch::Tensor& t) { return t.narrow(1, start, lengths[n]); };
      auto r = mamba2_ssd_recurrent(part(in[0]), part(in[1]), in[2], part(in[3]).repeat_interleave(H / G, 2),
                                    part(in[4]).repeat_interleave(H / G, 2), in[5].narrow(0, int64_t(n), 1));
      outs.push_back(r.o);
      finals.push_back(r.final_state);
      start += lengths[n];
    }
    return std::vector<torch::Tensor>{torch::cat(outs, 1), torch::cat(finals, 0)};
  };
  KernelFn packed = [&](const std::vector<torch::Tensor>& in) {
    auto r = mamba2_ssd_chunk_fused(in[0], in[1], in[2], in[3], in[4], in[5], 16, cu);
    return std::vector<torch::Tensor>{r.o, r.final_state};
  };
  require_same_outputs_and_grads(per_sequence, packed, {c.x, c.dt, c.A, Bg, Cg, s0}, names);
}

TEST_CASE("mamba2_ssd kernels reject bad shapes with a clear error", "[linear1][mamba2]") {
  auto c = make_case(5);
  CHECK_THROWS_WITH(mamba2_ssd_chunk(c.x, c.dt, c.A.slice(0, 0, 1), c.B, c.C), Catch::Contains("'A'"));
  CHECK_THROWS_WITH(mamba2_ssd_recurrent(c.x, c.dt, c.A, c.B, c.C.slice(3, 0, 4)), Catch::Contains("'C'"));
}

TEST_CASE("mamba2 mixer: decode token by token == full forward", "[linear1][mamba2][mixer]") {
  const json small = {{"mamba_head_dim", 16}, {"mamba_d_state", 8}};
  CHECK(mixer_decode_error("mamba2", small, torch::kFloat64) < 1e-10);
  json rec = small;
  rec["form"] = "recurrent";
  CHECK(mixer_decode_error("mamba2", rec, torch::kFloat64) < 1e-10);
  json grouped = small;
  grouped["mamba_ngroups"] = 2;
  grouped["chunk_size"] = 3;
  grouped["mamba_d_skip"] = false;
  CHECK(mixer_decode_error("mamba2", grouped, torch::kFloat64) < 1e-10);
  CHECK(mixer_decode_error("mamba2", small, torch::kFloat32) < 2e-3);
}

TEST_CASE("mamba2 mixer: chunk form == recurrent form, bad args rejected", "[linear1][mamba2][mixer]") {
  const json small = {{"mamba_head_dim", 16}, {"mamba_d_state", 8}, {"chunk_size", 4}};
  json rec = small;
  rec["form"] = "recurrent";
  auto chunked = make_mixer("mamba2", 32, 2, small, 11);
  auto recurrent = make_mixer("mamba2", 32, 2, rec, 11);
  auto x = randn_f64({2, 9, 32});
  CHECK(max_rel_err(chunked->forward(x, nullptr), recurrent->forward(x, nullptr)) < 1e-10);
  CHECK_THROWS_WITH(build_mixer("mamba2", 32, 2, {{"mamba_head_dim", 48}}, 1),
                    Catch::Contains("mamba_head_dim"));
  CHECK_THROWS_WITH(build_mixer("mamba2", 32, 2, {{"mamba_head_dim", 16}, {"mamba_ngroups", 3}}, 1),
                    Catch::Contains("mamba_ngroups"));
}
