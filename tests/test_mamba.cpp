// Mamba (v1) (docs/models.md#mamba): the selective scan's chunked (doubling) and fused CPU forms equal the token-by-token recurrence
// in fp64, outputs, final state and every gradient; the layer spelled out token by token in fp64. Causality, decode
// == forward and gradients reaching every parameter are in the mixer contract (tests/test_mixer_contract.cpp); fla's
// own logits in tests/test_fla_models.cpp.
#include <cmath>

#include "runtime/mamba/selective_scan.h"
#include "runtime/registry.h"
#include "tests/mixer_test_util.h"

using namespace mnemo;
using namespace mnemo::test;

namespace {

struct ScanCase {
  torch::Tensor x, dt, A, B, C, s0;
};

// dt = softplus(N(0, 1) − 1) (a wide spread of steps, some near 2), A = −exp(U(0, ln 16)) per channel and state.
ScanCase make_case(int64_t T, int64_t Bn = 2, int64_t D = 5, int64_t N = 4) {
  return {randn_f64({Bn, T, D}), torch::softplus(randn_f64({Bn, T, D}) - 1.0),
          -torch::exp(torch::rand({D, N}, torch::kFloat64) * std::log(16.0)), randn_f64({Bn, T, N}),
          randn_f64({Bn, T, N}), randn_f64({Bn, D, N})};
}

enum class Form { recurrent, chunk, fused };

KernelFn scan_fn(Form form, int64_t L) {
  return [=](const std::vector<torch::Tensor>& in) {
    torch::Tensor s0 = in.size() > 5 ? in[5] : torch::Tensor();
    auto r = form == Form::chunk   ? selective_scan_chunk(in[0], in[1], in[2], in[3], in[4], s0, L)
             : form == Form::fused ? selective_scan_fused(in[0], in[1], in[2], in[3], in[4], s0, L)
                                   : selective_scan_recurrent(in[0], in[1], in[2], in[3], in[4], s0);
    return std::vector<torch::Tensor>{r.o, r.final_state};
  };
}

constexpr int64_t kMambaB = 2, kMambaT = 9, kMambaD = 16;

// The layer by its equations (runtime/mamba/mixer.cpp), one token at a time, from its own parameters.
torch::Tensor mamba_by_hand(const torch::OrderedDict<std::string, torch::Tensor>& p, const torch::Tensor& u,
                            int64_t d_inner, int64_t N, int64_t R, int64_t K) {
  auto xz = torch::matmul(u, p["in_proj.weight"].t());
  auto x = xz.narrow(-1, 0, d_inner), z = xz.narrow(-1, d_inner, d_inner);
  // Causal depthwise conv: tap j of K reads token t − (K − 1 − j).
  auto w = p["conv.weight"].view({d_inner, K});
  auto conv = torch::zeros_like(x) + p["conv_bias"];
  for (int64_t j = 0; j < K; ++j) {
    const int64_t lag = K - 1 - j;
    if (lag >= kMambaT) continue;
    conv.narrow(1, lag, kMambaT - lag).add_(x.narrow(1, 0, kMambaT - lag) * w.select(1, j));
  }
  x = torch::silu(conv);
  auto dbc = torch::matmul(x, p["x_proj.weight"].t());
  auto dt = torch::softplus(torch::matmul(dbc.narrow(-1, 0, R), p["dt_proj.weight"].t()) + p["dt_proj.bias"]);
  auto Bm = dbc.narrow(-1, R, N), Cm = dbc.narrow(-1, R + N, N);
  auto A = -p["A_log"].exp();
  auto h = torch::zeros({kMambaB, d_inner, N}, torch::kFloat64);
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < kMambaT; ++t) {
    // h_t = exp(Δ_t A) h_{t−1} + Δ_t x_t B_t,  y_t = h_t C_t + D x_t
    auto d_t = dt.select(1, t).unsqueeze(-1);
    h = (d_t * A).exp() * h + d_t * x.select(1, t).unsqueeze(-1) * Bm.select(1, t).unsqueeze(1);
    ys.push_back((h * Cm.select(1, t).unsqueeze(1)).sum(-1) + p["D"] * x.select(1, t));
  }
  auto y = torch::stack(ys, 1) * torch::silu(z);
  return torch::matmul(y, p["out_proj.weight"].t());
}

}  // namespace

TEST_CASE("selective scan: chunked (doubling) and fused == recurrent in fp64, outputs, final state and gradients",
          "[linear1][mamba]") {
  torch::manual_seed(1);
  const std::vector<std::string> names = {"x", "dt", "A", "B", "C", "initial_state"};
  const int threads = at::get_num_threads();
  for (const Form form : {Form::chunk, Form::fused}) {
    for (int n_threads : {1, 3}) {  // the fused scan splits the channels into one block per thread
      if (form == Form::chunk && n_threads > 1) continue;
      at::set_num_threads(n_threads);
      for (int64_t T : {1, 7, 63, 100}) {
        for (int64_t L : {1, 5, 16, 64}) {
          for (bool with_state : {false, true}) {
            INFO((form == Form::chunk ? "chunk" : "fused") << " threads " << n_threads << " T " << T << " chunk "
                                                           << L << " state " << with_state);
            auto c = make_case(T);
            std::vector<torch::Tensor> inputs = {c.x, c.dt, c.A, c.B, c.C};
            if (with_state) inputs.push_back(c.s0);
            require_same_outputs_and_grads(scan_fn(Form::recurrent, 0), scan_fn(form, L), inputs, names, 1e-12,
                                           1e-11);
          }
        }
      }
    }
  }
  at::set_num_threads(threads);
}

TEST_CASE("selective scan: the doubling scan keeps decays that underflow and states that carry across chunks",
          "[linear1][mamba]") {
  // Steps of Δ A down to −400 per token: the products of decays underflow to 0 (a state forgotten), never overflow.
  torch::manual_seed(2);
  auto c = make_case(40, 1, 3, 2);
  auto dt = c.dt * 25.0;
  auto ref = selective_scan_recurrent(c.x, dt, c.A, c.B, c.C, c.s0);
  for (const auto& chunked : {selective_scan_chunk(c.x, dt, c.A, c.B, c.C, c.s0, 16),
                              selective_scan_fused(c.x, dt, c.A, c.B, c.C, c.s0, 16)}) {
    CHECK(torch::isfinite(chunked.o).all().item<bool>());
    CHECK(max_rel_err(chunked.o, ref.o) <= 1e-12);
    CHECK(max_rel_err(chunked.final_state, ref.final_state) <= 1e-12);
  }
  // fp32 against the fp64 reference.
  auto f32 = selective_scan_chunk(c.x.to(torch::kFloat32), c.dt.to(torch::kFloat32), c.A.to(torch::kFloat32),
                                  c.B.to(torch::kFloat32), c.C.to(torch::kFloat32), c.s0.to(torch::kFloat32), 16);
  auto ref64 = selective_scan_recurrent(c.x, c.dt, c.A, c.B, c.C, c.s0);
  CHECK(max_rel_err(f32.o.to(torch::kFloat64), ref64.o) <= 1e-5);
  auto f32_fused = selective_scan_fused(c.x.to(torch::kFloat32), c.dt.to(torch::kFloat32), c.A.to(torch::kFloat32),
                                        c.B.to(torch::kFloat32), c.C.to(torch::kFloat32), c.s0.to(torch::kFloat32), 16);
  CHECK(max_rel_err(f32_fused.o.to(torch::kFloat64), ref64.o) <= 1e-5);
  CHECK_THROWS_WITH(selective_scan_chunk(c.x, c.dt, c.A.narrow(0, 0, 2), c.B, c.C, c.s0, 16),
                    Catch::Contains("selective_scan_chunk") && Catch::Contains("'A'"));
}

TEST_CASE("mamba: the layer spelled out token by token in fp64 (chunk and recurrent forms)", "[mamba]") {
  const auto& fam = Registry::instance().mixer("mamba");
  auto u = torch::randn({kMambaB, kMambaT, kMambaD}, torch::kFloat64);
  for (const std::string form : {"chunk", "recurrent"}) {
    DYNAMIC_SECTION(form) {
      MixerContext ctx;
      ctx.d_model = kMambaD;
      ctx.n_heads = 2;
      ctx.args = fam.defaults;
      ctx.args.update({{"form", form}, {"chunk_size", 4}, {"mamba_d_state", 3}});
      torch::manual_seed(5);
      auto m = fam.make(ctx);
      m->to(torch::kFloat64);
      auto p = m->named_parameters();
      {
        torch::NoGradGuard no_grad;  // D away from 1, so that the skip is seen
        p["D"].copy_(1 + 0.5 * torch::randn({2 * kMambaD}, torch::kFloat64));
      }
      CHECK(p["A_log"].sizes() == torch::IntArrayRef({2 * kMambaD, 3}));
      CHECK(p["dt_proj.weight"].sizes() == torch::IntArrayRef({2 * kMambaD, 1}));  // dt_rank ceil(16 / 16)
      auto dt0 = torch::softplus(p["dt_proj.bias"]);  // Δ's bias starts inside [dt_min, dt_max]
      CHECK(dt0.min().item<double>() >= 1e-3 * (1 - 1e-9));
      CHECK(dt0.max().item<double>() <= 1e-1 * (1 + 1e-9));
      CHECK(max_rel_err(m->forward(u, nullptr), mamba_by_hand(p, u, 2 * kMambaD, 3, 1, 4)) <= 1e-12);
    }
  }
}
