// Log-linear Mamba-2 (runtime/log_linear_mamba2): its layer over the log-linear kernel's scalar-decay mode. The kernel's
// forms are proven in tests/test_log_linear_gdn.cpp (recurrence == chunked form in fp64, fla's naive reference as the
// fixture op log_linear_attn); every mixer's contract (causality, decode == forward, gradients) in
// tests/test_mixer_contract.cpp; fla's own LogLinearMamba2ForCausalLM against the import in tests/test_fla_models.cpp.
#include <catch2/catch.hpp>

#include "engine/io/fla_import.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::max_rel_err;

TEST_CASE("log_linear_mamba2: decoding after a prefill equals the full forward, the state O(levels)",
          "[log_linear_mamba2]") {
  // d_model 32, expand 2: 4 heads of 16; 40 tokens over 3 level weights fold levels 3..6 into the top one.
  auto m = mnemo::test::make_mixer("log_linear_mamba2", 32, 2,
                                   {{"mamba_head_dim", 16}, {"mamba_d_state", 8}, {"num_levels", 3}, {"chunk_size", 4}},
                                   5);
  m->to(torch::kFloat64);
  torch::manual_seed(4);
  auto x = torch::randn({2, 40, 32}, torch::kFloat64);
  torch::NoGradGuard no_grad;
  auto full = m->forward(x, nullptr);
  LayerState st;
  auto got = mnemo::test::prefill_decode(*m, x, 29, &st);
  CHECK(max_rel_err(got, full) <= 1e-10);
  CHECK(st.at("memory").sizes() == torch::IntArrayRef({2, 4, 3, 8, 16}));  // [B, H, levels, d_state, head_dim]
  // The recurrent form over the whole sequence is the same function.
  auto rec = mnemo::test::make_mixer("log_linear_mamba2", 32, 2,
                                     {{"mamba_head_dim", 16}, {"mamba_d_state", 8}, {"num_levels", 3},
                                      {"chunk_size", 4}, {"form", "recurrent"}},
                                     5);
  rec->to(torch::kFloat64);
  CHECK(max_rel_err(rec->forward(x, nullptr), full) <= 1e-10);
}

TEST_CASE("log_linear_mamba2: import-fla refuses what its layer does not compute, naming the field",
          "[log_linear_mamba2]") {
  const json base = {{"model_type", "log_linear_mamba2"}, {"hidden_size", 64}, {"num_hidden_layers", 2},
                     {"head_dim", 16}, {"state_size", 64}, {"num_heads", 8}};
  CHECK(fla_config_to_mnemo(base, "config.json").family == "log_linear_mamba2");
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"residual_in_fp32", true}, {"attnres_block_size", 2}, {"norm_before_gate", true}, {"D_has_hdim", true},
           {"hidden_act", "gelu"}, {"rmsnorm", false}}) {
    CAPTURE(field);
    json config = base;
    config[field] = value;
    CHECK_THROWS_WITH(fla_config_to_mnemo(config, "config.json"),
                      Catch::Contains("cannot import fla log_linear_mamba2 exactly") && Catch::Contains(field));
  }
}
