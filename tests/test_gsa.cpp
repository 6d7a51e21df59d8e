// Gated Slot Attention (docs/models.md#gsa): the chunked form equals the token-by-token recurrence in fp64, outputs,
// both final slot states and every gradient, through the factorised and the masked intra-chunk paths, with the second
// pass eager or on GLA's fused kernels. Causality,
// decode == forward and gradients reaching every parameter are in the mixer contract (tests/test_mixer_contract.cpp);
// fla's own logits in tests/test_fla_models.cpp.
#include "runtime/gsa/gsa.h"
#include "tests/mixer_test_util.h"

using namespace mnemo;
using namespace mnemo::test;

namespace {

struct GsaCase {
  torch::Tensor q, k, v, s, g, key_slots, value_slots;
};

// The layer's gates: g = logsigmoid(f) / normaliser, s = 1 − e^{g}; `normaliser` 8 as fla's default, 0.05 for decays
// strong enough to leave the factorised form.
GsaCase make_case(int64_t T, double normaliser, int64_t B = 2, int64_t H = 2, int64_t K = 6, int64_t V = 5,
                  int64_t M = 4) {
  auto g = torch::log_sigmoid(randn_f64({B, T, H, M})) / normaliser;
  return {randn_f64({B, T, H, K}), randn_f64({B, T, H, K}), randn_f64({B, T, H, V}), 1 - g.exp(), g,
          randn_f64({B, H, K, M}), randn_f64({B, H, M, V})};
}

KernelFn gsa_fn(bool chunked, int64_t L, GlaChunkRoute route = GlaChunkRoute::kEager) {
  return [=](const std::vector<torch::Tensor>& in) {
    torch::Tensor k0 = in.size() > 5 ? in[5] : torch::Tensor(), v0 = in.size() > 6 ? in[6] : torch::Tensor();
    auto r = chunked ? gsa_chunk(in[0], in[1], in[2], in[3], in[4], 0.7, k0, v0, L, route)
                     : gsa_recurrent(in[0], in[1], in[2], in[3], in[4], 0.7, k0, v0);
    return std::vector<torch::Tensor>{r.o, r.key_slots, r.value_slots};
  };
}

}  // namespace

TEST_CASE("gsa: chunked == recurrent in fp64, outputs, both slot states and gradients", "[linear1][gsa]") {
  torch::manual_seed(1);
  const std::vector<std::string> names = {"q", "k", "v", "s", "g", "key_slots0", "value_slots0"};
  for (double normaliser : {8.0, 0.05}) {  // 0.05: in-chunk spans of hundreds, the masked path
    for (int64_t T : {1, 7, 63, 100}) {
      for (int64_t L : {5, 16, 64}) {
        for (bool with_state : {false, true}) {
          INFO("normaliser " << normaliser << " T " << T << " chunk " << L << " state " << with_state);
          auto c = make_case(T, normaliser);
          std::vector<torch::Tensor> inputs = {c.q, c.k, c.v, c.s, c.g};
          if (with_state) {
            inputs.push_back(c.key_slots);
            inputs.push_back(c.value_slots);
          }
          // kFusedKernel: the second pass as on a GPU, the CUDA kernels' block code over the host grid.
          for (auto route : {GlaChunkRoute::kEager, GlaChunkRoute::kFusedKernel}) {
            INFO("fused kernel route " << (route == GlaChunkRoute::kFusedKernel));
            require_same_outputs_and_grads(gsa_fn(false, 0), gsa_fn(true, L, route), inputs, names);
          }
        }
      }
    }
  }
}

TEST_CASE("gsa: shapes it cannot take end in one clear error", "[linear1][gsa]") {
  auto c = make_case(8, 8.0);
  CHECK_THROWS_WITH(gsa_chunk(c.q, c.k, c.v, c.s, c.g.narrow(-1, 0, 3), 1.0),
                    Catch::Contains("gsa_chunk") && Catch::Contains("'g'"));
  CHECK_THROWS_WITH(gsa_recurrent(c.q, c.k, c.v, c.s, c.g, 1.0, c.value_slots),
                    Catch::Contains("gsa_recurrent") && Catch::Contains("'key_slots0'"));
}
