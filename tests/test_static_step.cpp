// The training step on static tensors (engine/training/static_step.h), the step config key cuda_graph captures:
// run eagerly on the CPU it must be the eager trainer step's arithmetic (forward, loss, backward, clip_grad_norm_,
// AdamW), so that what a GPU captures is that step. Capture itself needs a CUDA device (cuda.* tests, gpu-check).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "engine/evaluation/token_eval.h"
#include "engine/tools/bench.h"
#include "engine/training/optim.h"
#include "engine/training/static_step.h"
#include "engine/training/trainer.h"
#include "runtime/backbone.h"
#include "tests/test_util.h"

using namespace mnemo;

namespace static_step_test {

Backbone small_backbone(const std::string& family, uint64_t seed) {
  BenchOptions opt;
  opt.model = family;
  opt.d_model = 16;
  opt.n_layers = 2;
  opt.n_heads = 2;
  opt.vocab_size = 32;
  torch::manual_seed(seed);
  return make_backbone("language_model", model_config_from_json(bench_model_config(opt)));
}

TrainBatch random_batch(int64_t step) {
  torch::manual_seed(100 + step);
  TrainBatch b;
  b.input_ids = torch::randint(32, {3, 10});
  b.labels = torch::randint(32, {3, 10});
  b.labels.narrow(1, 0, 4).fill_(-100);  // unlabelled positions, as MQAR's keys
  b.tokens = 30;
  b.labelled = 18;
  return b;
}

const json kAdamW = {{"lr", 1e-2}, {"beta1", 0.9}, {"beta2", 0.95}, {"adam_eps", 1e-8}, {"weight_decay", 0.1}};

// The trainer's eager step with one micro-batch (optimiser_step, accum 1): loss (+ aux), backward, clip, AdamW.
double eager_step(Backbone& m, torch::optim::AdamW& opt, const TrainBatch& b, double clip) {
  opt.zero_grad();
  auto loss = token_loss(m.forward(b.input_ids), b.labels);
  auto aux = m.aux_loss();
  (aux.defined() ? loss + aux : loss).backward();
  if (clip > 0) torch::nn::utils::clip_grad_norm_(m.module->parameters(), clip);
  opt.step();
  return loss.item<double>();
}

}  // namespace static_step_test

using namespace static_step_test;

TEST_CASE("static training step (cuda_graph's, run eagerly) equals the eager step: losses, weights, AdamW moments "
          "and step counts after 3 steps (fp64), clip on and off, with and without an auxiliary loss",
          "[train][cuda_graph]") {
  test::DefaultDtype f64(caffe2::TypeMeta::Make<double>());
  for (const std::string family : {"gated_deltanet", "mom"}) {
    for (const double clip : {0.0, 0.05}) {
      CAPTURE(family, clip);
      auto eager = small_backbone(family, 4), stat = small_backbone(family, 4);
      auto opt_e = make_adamw(*eager.module, kAdamW), opt_s = make_adamw(*stat.module, kAdamW);
      StaticTrainStep step(stat, *opt_s, random_batch(0), clip, torch::kCPU, Precision::fp64, /*capture=*/false);
      REQUIRE_FALSE(step.captured());
      for (int64_t s = 0; s < 3; ++s) {
        const double lr = 1e-2 * (s + 1) / 3.0;  // a schedule: the static step reads lr each time
        set_lr(*opt_e, lr);
        const double loss_e = eager_step(eager, *opt_e, random_batch(s), clip);
        const auto v = step.run(random_batch(s), lr);
        REQUIRE(v.loss == Approx(loss_e).epsilon(1e-12));
        if (family == "mom") REQUIRE(std::isfinite(v.aux));
        if (clip > 0) REQUIRE(v.grad_norm > clip);  // the clip acted
      }
      auto pe = eager.module->named_parameters(), ps = stat.module->named_parameters();
      for (const auto& item : pe) {
        INFO(item.key());
        const auto& p_s = ps[item.key()];
        REQUIRE(test::max_rel_err(p_s, item.value(), 1e-8) < 1e-11);
        auto& se = adamw_state(*opt_e, item.value());
        auto& ss = adamw_state(*opt_s, p_s);
        REQUIRE(ss.step() == se.step());
        REQUIRE(test::max_rel_err(ss.exp_avg(), se.exp_avg(), 1e-8) < 1e-11);
        REQUIRE(test::max_rel_err(ss.exp_avg_sq(), se.exp_avg_sq(), 1e-12) < 1e-11);
      }
    }
  }
  // A batch of another shape than the static inputs is an error naming both.
  auto m = small_backbone("gated_deltanet", 1);
  auto opt = make_adamw(*m.module, kAdamW);
  StaticTrainStep step(m, *opt, random_batch(0), 1.0, torch::kCPU, Precision::fp64, false);
  auto other = random_batch(1);
  other.input_ids = other.input_ids.narrow(1, 0, 5);
  REQUIRE_THROWS_WITH(step.run(other, 1e-3), Catch::Contains("[3, 5]") && Catch::Contains("[3, 10]"));
}

TEST_CASE("cuda_graph: what a captured step cannot do is refused with the reason", "[train][cuda_graph]") {
  auto dir = test::temp_dir("cuda_graph_refused");
  json cfg = {{"model", "gated_deltanet"}, {"task", "mqar"}, {"vocab_size", 64}, {"seq_len", 32}, {"num_kv_pairs", 2},
              {"d_model", 16}, {"n_layers", 1}, {"n_heads", 2}, {"batch_size", 4}, {"n_train", 64}, {"n_test", 16},
              {"steps", 2}, {"device", "cpu"}, {"cuda_graph", true}};
  TrainOptions opt;
  opt.db_path = (dir / "r.sqlite").string();
  opt.out_dir = (dir / "run").string();
  opt.quiet = true;
  REQUIRE_THROWS_WITH(train(cfg, opt), Catch::Contains("cuda_graph: needs a CUDA device"));
}
