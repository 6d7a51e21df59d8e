#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include <cmath>

#include "results/db.h"
#include "engine/config/run_config.h"
#include "core/torch_compat.h"
#include "engine/tools/bench.h"
#include "engine/training/cuda_graph.h"
#include "engine/training/optim.h"
#include "engine/training/trainer.h"
#include "runtime/model.h"
#include "runtime/no_weight_decay.h"
#include "model_test_util.h"
#include "test_util.h"

using namespace mnemo;

TEST_CASE("cosine schedule with linear warm-up", "[train][schedule]") {
  const double lr = 1e-3;
  REQUIRE(cosine_lr(0, 100, 10, lr, 0.1) == Approx(1e-4));
  REQUIRE(cosine_lr(4, 100, 10, lr, 0.1) == Approx(5e-4));
  REQUIRE(cosine_lr(9, 100, 10, lr, 0.1) == Approx(1e-3));
  REQUIRE(cosine_lr(10, 100, 10, lr, 0.1) == Approx(1e-3));
  REQUIRE(cosine_lr(99, 100, 10, lr, 0.1) == Approx(1e-4));
  // halfway through the decay: min + (1 - min)/2
  const double mid = cosine_lr(10 + 89 / 2.0, 100, 10, lr, 0.1);
  REQUIRE(mid == Approx(lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 44.0 / 89)))));
  for (int s = 11; s < 100; ++s) REQUIRE(cosine_lr(s, 100, 10, lr, 0.1) <= cosine_lr(s - 1, 100, 10, lr, 0.1));
  REQUIRE(cosine_lr(0, 10, 0, lr, 0.0) == Approx(lr));
}

TEST_CASE("weight decay only on 2-D weight matrices", "[train]") {
  // Parameters that their modules declare as no-decay (runtime/no_weight_decay.h), plus every tensor below 2-D.
  const std::set<std::string> declared = {"embed.weight", "block0.mixer.persistent_tokens"};
  REQUIRE(decays("block0.mixer.q_proj.weight", torch::zeros({4, 4}), declared));
  REQUIRE_FALSE(decays("block0.mixer_norm.weight", torch::zeros({4}), declared));
  REQUIRE_FALSE(decays("embed.weight", torch::zeros({10, 4}), declared));
  REQUIRE_FALSE(decays("block0.mixer.A_log", torch::zeros({4}), declared));
  REQUIRE_FALSE(decays("block0.mixer.persistent_tokens", torch::zeros({4, 4}), declared));
}

TEST_CASE("learned initial memory states are declared no-decay (docs/models.md#conventions)", "[train]") {
  for (const std::string model : {"lattice_dec", "lattice_dot", "titans_lmm"}) {
    CAPTURE(model);
    ModelConfig mc = model_config_from_json(
        {{"model", model}, {"vocab_size", 16}, {"d_model", 16}, {"n_layers", 1}, {"n_heads", 2}});
    LanguageModel lm(mc);
    const auto declared = no_weight_decay_parameters(*lm);
    bool has_initial_state = false;
    for (const auto& p : lm->named_parameters())
      if (p.key().find("S_init") != std::string::npos || p.key().find("memory_init") != std::string::npos) {
        has_initial_state = true;
        CHECK(declared.count(p.key()) == 1);
        CHECK_FALSE(decays(p.key(), p.value(), declared));
      }
    CHECK(has_initial_state);
  }
}

namespace {

// Three AdamW steps of MultiTensorAdamW and of torch::optim::AdamW on the same two parameter groups (with and
// without weight decay) and the same gradients: the parameters and every state entry agree.
void check_multi_tensor_adamw(const torch::Device& device, torch::ScalarType dtype, double tol) {
  const auto opts = torch::TensorOptions().device(device).dtype(dtype);
  torch::manual_seed(11);
  std::vector<torch::Tensor> init = {torch::randn({5, 3}), torch::randn({7}), torch::randn({2, 4})};
  auto make = [&] {
    std::vector<torch::Tensor> ps;
    for (const auto& t : init) ps.push_back(t.to(opts).clone().requires_grad_());
    return ps;
  };
  auto a = make(), b = make();
  auto groups = [](const std::vector<torch::Tensor>& ps) {
    auto base = torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).eps(1e-8);
    auto decay = std::make_unique<torch::optim::AdamWOptions>(base);
    decay->weight_decay(0.1);
    auto none = std::make_unique<torch::optim::AdamWOptions>(base);
    none->weight_decay(0.0);
    std::vector<torch::optim::OptimizerParamGroup> g;
    g.emplace_back(std::vector<torch::Tensor>{ps[0], ps[2]}, std::move(decay));
    g.emplace_back(std::vector<torch::Tensor>{ps[1]}, std::move(none));
    return g;
  };
  mnemo::MultiTensorAdamW fused(groups(a), torch::optim::AdamWOptions(3e-3));
  torch::optim::AdamW plain(groups(b), torch::optim::AdamWOptions(3e-3));
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      auto g = torch::randn(init[i].sizes()).to(opts);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    fused.step();
    plain.step();
    CHECK(fused.last_step_fused() == mnemo::torch_compat::has_fused_adamw());
  }
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK((a[i] - b[i]).abs().max().item<double>() <= tol);
  }
  // The state as torch::optim::AdamW keeps it (a checkpoint of one loads into the other). The parameters'
  // shapes differ, so a state's counterpart is the other optimiser's state of the same shape.
  auto states = [](const torch::optim::Optimizer& o) {
    std::vector<const torch::optim::AdamWParamState*> out;
    for (const auto& kv : o.state()) out.push_back(&static_cast<const torch::optim::AdamWParamState&>(*kv.second));
    return out;
  };
  const auto sa = states(fused), sb = states(plain);
  REQUIRE(sa.size() == a.size());
  REQUIRE(sb.size() == b.size());
  double moment_err = 0;
  for (const auto* st : sa) {
    CHECK(st->step() == 3);
    int matched = 0;
    for (const auto* other : sb) {
      if (other->exp_avg().sizes() != st->exp_avg().sizes()) continue;
      ++matched;
      moment_err = std::max({moment_err, (st->exp_avg() - other->exp_avg()).abs().max().item<double>(),
                             (st->exp_avg_sq() - other->exp_avg_sq()).abs().max().item<double>()});
    }
    CHECK(matched == 1);
  }
  CHECK(moment_err <= tol);
}

}  // namespace

TEST_CASE("MultiTensorAdamW: the update and the state of torch::optim::AdamW (multi-tensor kernel where LibTorch has one)",
          "[train][optim]") {
  check_multi_tensor_adamw(torch::kCPU, torch::kFloat64, 1e-12);
  check_multi_tensor_adamw(torch::kCPU, torch::kFloat32, 1e-6);
}

TEST_CASE("cuda: MultiTensorAdamW on the device: the update and the state of torch::optim::AdamW",
          "[.cuda-train_step]") {
  REQUIRE(torch::cuda::is_available());
  check_multi_tensor_adamw(torch::Device(torch::kCUDA), torch::kFloat32, 1e-6);
}

namespace {

// `steps` training steps of a small model (d 64, 2 layers, vocab 128, fp32) on fixed random tokens, eager or with
// the step captured as a CUDA graph after `warmup` eager ones and replayed for the rest; its parameters.
std::vector<torch::Tensor> graph_test_steps(const std::string& family, bool graphed, int warmup, int steps,
                                            const torch::Device& device) {
  LanguageModel model = test::small_model(family, 64, 128, 7);
  model->to(device);
  model->train();
  auto adamw = make_adamw(*model, json{{"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.95}, {"adam_eps", 1e-8},
                                      {"weight_decay", 0.1}});
  torch::manual_seed(8);
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
  const torch::Tensor tokens = torch::randint(0, 128, {4, 64}, longs);
  const torch::Tensor targets = torch::randint(0, 128, {4, 64}, longs);
  auto step = [&] {
    model->zero_grad(/*set_to_none=*/false);
    torch::Tensor logits = model->forward(tokens);
    torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1})).backward();
    adamw->step();
  };
  if (graphed) {
    CapturedStep graph(step, device, warmup);
    for (int i = warmup; i < steps; ++i) graph.replay();
  } else {
    for (int i = 0; i < steps; ++i) step();
  }
  std::vector<torch::Tensor> params;
  for (const auto& p : model->parameters()) params.push_back(p.detach().to(torch::kCPU));
  return params;
}

}  // namespace

TEST_CASE("CUDA graph: refused with the reason where there is no CUDA", "[train][cuda_graph]") {
  if (cuda_graphs_available()) {
    REQUIRE_THROWS_WITH(CapturedStep([] {}, torch::Device(torch::kCPU)), Catch::Contains("is not a CUDA device"));
  } else {
    REQUIRE_THROWS_WITH(CapturedStep([] {}, torch::Device(torch::kCPU)), Catch::Contains("without CUDA"));
  }
  BenchOptions opt;
  opt.model = "transformer";
  opt.device = "cpu";
  opt.seq_lens = {16};
  opt.cuda_graph = true;
  REQUIRE_THROWS_WITH(run_benchmarks(opt, nullptr), Catch::Contains("--cuda-graph"));
}

TEST_CASE("cuda: a training step captured as a CUDA graph replays the eager steps", "[.cuda-train_step]") {
  REQUIRE(torch::cuda::is_available());
  const torch::Device cuda(torch::kCUDA);
  // Transformer++ (cuBLAS, softmax attention) and Gated DeltaNet (the fused delta-rule kernels): 2 eager steps and
  // 4 replays against 6 eager steps from the same initialisation (the capture itself runs nothing).
  for (const std::string family : {"transformer", "gated_deltanet"}) {
    INFO(family);
    const auto eager = graph_test_steps(family, false, 2, 6, cuda);
    const auto graphed = graph_test_steps(family, true, 2, 6, cuda);
    REQUIRE(eager.size() == graphed.size());
    double worst = 0;
    for (size_t i = 0; i < eager.size(); ++i)
      worst = std::max(worst, (eager[i] - graphed[i]).abs().max().item<double>());
    INFO("largest parameter difference " << worst);
    REQUIRE(worst < 1e-5);
    // and the steps moved the parameters (a replay that did nothing would leave them at step 3)
    const auto three = graph_test_steps(family, false, 2, 3, cuda);
    double moved = 0;
    for (size_t i = 0; i < eager.size(); ++i)
      moved = std::max(moved, (eager[i] - three[i]).abs().max().item<double>());
    REQUIRE(moved > 1e-4);
  }
}

TEST_CASE("config resolution: defaults, task keys, unknown keys, wrong types", "[train][config]") {
  json cfg = resolve_run_config({{"model", "transformer"}, {"task", "mqar"}, {"seq_len", 128}});
  REQUIRE(cfg["seq_len"] == 128);
  REQUIRE(cfg["num_kv_pairs"] == 4);  // task default
  REQUIRE(cfg["d_model"] == 128);     // skeleton default
  REQUIRE(cfg["lr"].get<double>() == Approx(1e-3));
  REQUIRE(cfg.contains("rope_theta"));  // mixer args are keys too
  REQUIRE_THROWS_WITH(resolve_run_config({{"model", "transformer"}, {"task", "mqar"}, {"learning_rate", 1}}),
                      Catch::Contains("unknown config key 'learning_rate'"));
  REQUIRE_THROWS_WITH(resolve_run_config({{"model", "transformer"}, {"task", "mqar"}, {"steps", "many"}}),
                      Catch::Contains("'steps' expects a number"));
  REQUIRE_THROWS_WITH(resolve_run_config({{"model", "nope"}, {"task", "mqar"}}), Catch::Contains("unknown model 'nope'"));
  REQUIRE_THROWS_WITH(resolve_run_config({{"task", "mqar"}}), Catch::Contains("missing 'model'"));
  // an integer is accepted for a real-valued key of the chosen mixer
  REQUIRE(resolve_run_config({{"model", "swa"}, {"task", "mqar"}, {"rope_theta", 1}})["rope_theta"].get<double>() == 1.0);
  // the window key exists for swa, not for the plain transformer
  REQUIRE_THROWS_WITH(resolve_run_config({{"model", "transformer"}, {"task", "mqar"}, {"window", 8}}),
                      Catch::Contains("unknown config key 'window'"));
  // hashes ignore the device and logging cadence but not the lr
  json a = resolve_run_config({{"model", "transformer"}, {"task", "mqar"}});
  json b = resolve_run_config({{"model", "transformer"}, {"task", "mqar"}, {"device", "cpu"}, {"log_every", 3}});
  json c = resolve_run_config({{"model", "transformer"}, {"task", "mqar"}, {"lr", 0.01}});
  REQUIRE(config_hash(a) == config_hash(b));
  REQUIRE(config_hash(a) != config_hash(c));
}

namespace {
json tiny_mqar_run(const std::string& model) {
  return {{"model", model}, {"task", "mqar"}, {"vocab_size", 128}, {"seq_len", 64}, {"num_kv_pairs", 4},
          {"d_model", 64}, {"n_layers", 2}, {"n_heads", 2}, {"batch_size", 64}, {"n_train", 8000},
          {"n_test", 256}, {"lr", 3e-3}, {"device", "cpu"}};
}
}  // namespace

TEST_CASE("end to end: a 2-layer Transformer++ learns MQAR (L=64, 4 pairs) to >= 0.99 test accuracy", "[train][e2e]") {
  // The recipe was found by measurement on this 2-core machine (runs in the issue note): with lr 3e-3
  // and 10% warm-up the model stays at the "one of the 4 values in context" plateau (accuracy ~0.25)
  // for 1500+ steps; lr 1e-3 leaves it after ~250 steps but creeps to 0.94-0.97 by step 1000; lr 2e-3
  // with ~240 warm-up steps and 128 sequences per step from 40000 training examples exceeds 0.99 at
  // step ~1050 (early stop, Zoology's criterion). About 5-6 minutes on one core.
  auto dir = test::temp_dir("e2e");
  json cfg = tiny_mqar_run("transformer");
  cfg["lr"] = 2e-3;
  cfg["warmup_frac"] = 0.17;
  cfg["batch_size"] = 128;
  cfg["n_train"] = 40000;
  cfg["n_test"] = 500;
  cfg["steps"] = 1400;
  cfg["eval_every"] = 50;
  cfg["early_stop_acc"] = 0.99;
  TrainOptions opt;
  opt.db_path = (dir / "r.sqlite").string();
  opt.out_dir = (dir / "run").string();
  opt.quiet = true;
  auto r = train(cfg, opt);
  INFO("best test accuracy " << r.best_test_accuracy << ", final train loss " << r.final_train_loss << " after "
                             << r.steps << " steps");
  REQUIRE(r.best_test_accuracy >= 0.99);  // chance: 1/64
  ResultsDB db(opt.db_path);
  auto run = db.run(r.run_id);
  REQUIRE(run);
  REQUIRE(run->status == "completed");
  REQUIRE(!db.metrics(r.run_id).empty());
}

TEST_CASE("resume continues from the checkpoint without duplicating metric rows", "[train][resume]") {
  auto dir = test::temp_dir("resume");
  json cfg = tiny_mqar_run("transformer");
  cfg["d_model"] = 32;
  cfg["steps"] = 40;
  cfg["eval_every"] = 10;
  cfg["log_every"] = 5;
  cfg["early_stop_acc"] = 0.0;
  TrainOptions opt;
  opt.db_path = (dir / "r.sqlite").string();
  opt.out_dir = (dir / "uninterrupted").string();
  opt.quiet = true;
  auto full = train(cfg, opt);

  TrainOptions part = opt;
  part.out_dir = (dir / "interrupted").string();
  part.stop_after = 15;  // stops (checkpointed) at step 15, between two evaluations
  auto first = train(cfg, part);
  REQUIRE(first.steps == 15);
  ResultsDB db(opt.db_path);
  REQUIRE(db.run(first.run_id)->status == "stopped");
  part.stop_after = 0;
  part.resume = true;
  auto second = train(cfg, part);
  REQUIRE(second.run_id == first.run_id);
  REQUIRE(second.steps == 40);
  REQUIRE(db.run(first.run_id)->status == "completed");

  // Same rows (step, split, name) as the uninterrupted run, except the extra evaluation at the
  // stop, and the same numbers: data order and optimiser state are restored exactly.
  auto key_rows = [&](int64_t id) {
    std::map<std::string, double> m;
    for (const auto& r : db.metrics(id))
      if (r.split != "summary" && r.name != "tokens_per_s")
        m[std::to_string(r.step) + "/" + r.split + "/" + r.name] = r.value;
    return m;
  };
  auto a = key_rows(full.run_id), b = key_rows(first.run_id);
  b.erase("15/test/loss");
  b.erase("15/test/accuracy");
  REQUIRE(a.size() == b.size());
  for (const auto& [k, v] : a) {
    INFO(k);
    REQUIRE(b.count(k) == 1);
    REQUIRE(b[k] == Approx(v).epsilon(1e-4));
  }
  // A changed config cannot resume that checkpoint.
  json other = cfg;
  other["lr"] = 1e-2;
  REQUIRE_THROWS_WITH(train(other, part), Catch::Contains("differs from the checkpoint"));
}

namespace {

// One small MQAR training run (V 64, L 32, 2 key-value pairs: chance 1/32 per answer token; d_model 32,
// 1 layer, 2 heads, 400 steps of 32, lr 1e-2, seed 0) -> best answer-token test accuracy.
double small_mqar_accuracy(const std::string& model, bool with_chunk_size = true, int steps = 400) {
  auto dir = test::temp_dir("learn_mqar_" + model);
  json cfg = {{"model", model}, {"task", "mqar"}, {"vocab_size", 64}, {"seq_len", 32}, {"num_kv_pairs", 2},
              {"d_model", 32}, {"n_layers", 1}, {"n_heads", 2}, {"batch_size", 32}, {"n_train", 4000},
              {"n_test", 256}, {"lr", 1e-2}, {"steps", steps}, {"eval_every", 100}, {"device", "cpu"}};
  if (with_chunk_size) cfg["chunk_size"] = 16;
  TrainOptions opt;
  opt.db_path = (dir / "r.sqlite").string();
  opt.out_dir = (dir / "run").string();
  opt.quiet = true;
  auto r = train(cfg, opt);
  WARN(model << " MQAR best test accuracy " << r.best_test_accuracy << " after " << r.steps << " steps, "
             << r.wall_s << " s");
  mnemo::test::remove_dir_tree(dir);
  return r.best_test_accuracy;
}

// Measured with this recipe (1 thread; the threshold is > 2x chance): linear_attn 0.26, retnet 0.27, gla 0.18,
// deltanet 0.99, gated_deltanet 0.98, mamba2 0.49.
// One test case per model, so that CTest runs them in parallel (each is one training run).
TEST_CASE("linear_attn learns a small MQAR well above chance", "[train][learn][linear]") {
  CHECK(small_mqar_accuracy("linear_attn") >= 0.07);
}
// RetNet's fixed decays learn this recipe late, and where within the schedule depends on the BLAS kernels' rounding:
// 400 steps gave 0.27 on an AVX2 machine and 0.05 on an AVX-512 one (OpenBLAS picks its kernels by CPU;
// OPENBLAS_CORETYPE=Haswell on the latter gave 0.14). 800 steps: 0.52 with AVX-512, 0.40 with Haswell kernels.
TEST_CASE("retnet learns a small MQAR well above chance", "[train][learn][linear]") {
  CHECK(small_mqar_accuracy("retnet", true, 800) >= 0.07);
}
TEST_CASE("gla learns a small MQAR well above chance", "[train][learn][linear]") {
  CHECK(small_mqar_accuracy("gla") >= 0.07);
}
TEST_CASE("deltanet learns a small MQAR well above chance", "[train][learn][linear]") {
  CHECK(small_mqar_accuracy("deltanet") >= 0.07);
}
TEST_CASE("gated_deltanet learns a small MQAR well above chance", "[train][learn][linear]") {
  CHECK(small_mqar_accuracy("gated_deltanet") >= 0.07);
}
TEST_CASE("mamba2 learns a small MQAR well above chance", "[train][learn][linear]") {
  CHECK(small_mqar_accuracy("mamba2") >= 0.07);
}

// Measured: ttt_mlp 0.45, titans_mac 0.52, titans_mal 0.29 (titans_mag 0.53) after 400 steps (ttt_linear, titans_lmm
// and yaad have their own tests in test_ttt/test_titans/test_miras). Moneta and Memora train 800 steps: at 400 they
// are at the start of learning and a rounding-level change moves them across the bar (measured 2026-11-26, 1 thread, seeds
// 0-3: 400 steps moneta 0.09-0.23, memora 0.05-0.13; 800 steps moneta 0.83/0.38/0.40/0.18, memora
// 0.17/0.18/0.16/0.19).
TEST_CASE("ttt_mlp learns a small MQAR well above chance", "[train][learn][deep_memory]") {
  CHECK(small_mqar_accuracy("ttt_mlp", /*with_chunk_size=*/false) >= 0.07);
}
TEST_CASE("titans_mac learns a small MQAR well above chance", "[train][learn][deep_memory]") {
  CHECK(small_mqar_accuracy("titans_mac") >= 0.07);
}
TEST_CASE("titans_mag learns a small MQAR well above chance", "[train][learn][deep_memory]") {
  CHECK(small_mqar_accuracy("titans_mag") >= 0.07);
}
TEST_CASE("titans_mal learns a small MQAR well above chance", "[train][learn][deep_memory]") {
  CHECK(small_mqar_accuracy("titans_mal") >= 0.07);
}
TEST_CASE("moneta learns a small MQAR well above chance in 800 steps", "[train][learn][deep_memory]") {
  CHECK(small_mqar_accuracy("moneta", true, 800) >= 0.07);
}
TEST_CASE("memora learns a small MQAR well above chance in 800 steps", "[train][learn][deep_memory]") {
  CHECK(small_mqar_accuracy("memora", true, 800) >= 0.07);
}

// Measured: dla 0.25, swdt 1.00, mom 0.88, lattice_dec 0.17, lattice_dot 0.95, samba 0.49, gdn_h2 0.49 (omeganet,
// swla, deep_transformer and dot in test_atlas/test_deep_transformer; ATLAS takes minutes per run on a CPU: its
// figures come from configs/mqar_learning_atlas.json).
TEST_CASE("dla learns a small MQAR well above chance", "[train][learn][learn_extra]") {
  CHECK(small_mqar_accuracy("dla") >= 0.07);
}
TEST_CASE("swdt learns a small MQAR well above chance", "[train][learn][learn_extra]") {
  CHECK(small_mqar_accuracy("swdt") >= 0.07);
}
TEST_CASE("mom learns a small MQAR well above chance", "[train][learn][learn_extra]") {
  CHECK(small_mqar_accuracy("mom") >= 0.07);
}
TEST_CASE("lattice_dec learns a small MQAR well above chance", "[train][learn][learn_extra]") {
  CHECK(small_mqar_accuracy("lattice_dec") >= 0.07);
}
TEST_CASE("lattice_dot learns a small MQAR well above chance", "[train][learn][learn_extra]") {
  CHECK(small_mqar_accuracy("lattice_dot") >= 0.07);
}
TEST_CASE("samba learns a small MQAR well above chance", "[train][learn][learn_extra]") {
  CHECK(small_mqar_accuracy("samba") >= 0.07);
}
TEST_CASE("gdn_h2 learns a small MQAR well above chance", "[train][learn][learn_extra]") {
  CHECK(small_mqar_accuracy("gdn_h2") >= 0.07);
}

}  // namespace
