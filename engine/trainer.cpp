#include <torch/torch.h>

#include "engine/trainer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>

#include "core/defaults.h"
#include "core/progress.h"
#include "results/db.h"
#include "runtime/device.h"
#include "engine/checkpoint.h"
#include "engine/run_config.h"
#include "runtime/model.h"
#include "engine/optim.h"
#include "core/system_info.h"
#include "engine/token_eval.h"
#include "tasks/mad_tasks.h"
#include "tasks/task.h"

namespace mnemo {
namespace fs = std::filesystem;

namespace {

// Example indices of a step: seeded epoch permutations of the training set, a pure function of
// (seed, step), so resuming needs no data-loader state.
class EpochSampler {
 public:
  EpochSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  std::vector<int64_t> batch(int64_t step, int64_t batch_size) {
    std::vector<int64_t> idx;
    for (int64_t j = 0; j < batch_size; ++j) {
      int64_t g = step * batch_size + j;
      int64_t epoch = g / n_;
      if (epoch != epoch_) {
        perm_.resize(n_);
        std::iota(perm_.begin(), perm_.end(), 0);
        std::mt19937_64 rng(seed_ * 1000003ULL + static_cast<uint64_t>(epoch));
        std::shuffle(perm_.begin(), perm_.end(), rng);
        epoch_ = epoch;
      }
      idx.push_back(perm_[g % n_]);
    }
    return idx;
  }

 private:
  int64_t n_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> perm_;
};

}  // namespace

TrainResult train(const json& user_config, const TrainOptions& opt) {
  const json cfg = resolve_run_config(user_config);
  auto task_ptr = TaskRegistry::instance().make(cfg.at("task"), task_params_of(cfg));
  auto* task = dynamic_cast<TokenTask*>(task_ptr.get());
  if (!task) throw Error("task '" + cfg.at("task").get<std::string>() + "' cannot be trained (not a token task)");

  const std::string hash = config_hash(cfg);
  TrainResult result;
  result.out_dir = opt.out_dir.empty()
                       ? (fs::path(kDefaultRunsDir) / (cfg.at("model").get<std::string>() + "-" +
                                              cfg.at("task").get<std::string>() + "-" + hash)).string()
                       : opt.out_dir;
  const torch::Device device = resolve_device(opt.device.empty() ? cfg.at("device").get<std::string>() : opt.device);
  const int64_t steps = cfg.at("steps"), batch_size = cfg.at("batch_size"), eval_every = cfg.at("eval_every");
  const int64_t log_every = std::max<int64_t>(1, cfg.at("log_every").get<int64_t>());
  const uint64_t seed = cfg.at("seed").get<uint64_t>();
  if (steps <= 0 || batch_size <= 0) throw Error("steps and batch_size must be > 0");

  // Resume: the checkpoint's config must be the same run.
  TrainerState state;
  bool resuming = false;
  if (opt.resume && has_checkpoint(result.out_dir)) {
    json saved = load_checkpoint_config(result.out_dir);
    if (config_hash(resolve_run_config(saved)) != hash)
      throw Error("--resume: the configuration differs from the checkpoint in " + result.out_dir);
    state = load_trainer_state(result.out_dir);
    resuming = true;
  } else if (opt.resume) {
    std::printf("no checkpoint in %s: starting a new run\n", result.out_dir.c_str());
  }

  torch::manual_seed(seed);
  ModelConfig mc = model_config_from_json(cfg);
  mc.vocab_size = task->vocab_size();
  Backbone model = make_backbone(task_backbone(*task), mc);
  model.module->to(device);
  auto optimizer = make_adamw(*model.module, cfg);

  ResultsDB db(opt.db_path);
  if (resuming) {
    load_weights(result.out_dir, model);
    model.module->to(device);
    load_optimizer(result.out_dir, *optimizer);
    if (state.db_path != opt.db_path && !state.db_path.empty())
      std::printf("note: checkpoint was logged to %s; continuing in %s\n", state.db_path.c_str(), opt.db_path.c_str());
    if (!db.run(state.run_id)) throw Error("--resume: run " + std::to_string(state.run_id) + " not found in " + opt.db_path);
    db.delete_metrics_after(state.run_id, state.step);
    db.set_run_status(state.run_id, "running");
  } else {
    RunInfo r;
    r.model = cfg.at("model");
    r.task = cfg.at("task");
    r.config_json = cfg.dump();
    r.config_hash = hash;
    r.seed = static_cast<int64_t>(seed);
    r.device = device.str();
    r.git_commit = git_commit();
    r.host = hostname();
    r.out_dir = result.out_dir;
    r.sweep = opt.sweep;
    r.n_params = model.num_parameters();
    state.run_id = db.create_run(r);
    state.db_path = opt.db_path;
  }
  result.run_id = state.run_id;
  fs::create_directories(result.out_dir);

  const int64_t n_train = cfg.at("n_train"), n_test = cfg.at("n_test");
  std::vector<TokenExample> train_set;
  if (n_train > 0) train_set = task->examples(Split::train, n_train, seed);
  const auto test_set = task->examples(Split::test, n_test, seed);
  EpochSampler sampler(std::max<int64_t>(1, n_train), seed);

  const int64_t warmup = static_cast<int64_t>(std::llround(cfg.at("warmup_frac").get<double>() * steps));
  const double lr = cfg.at("lr"), min_ratio = cfg.at("min_lr_ratio"), clip = cfg.at("grad_clip");
  const double early_stop = cfg.at("early_stop_acc");
  std::vector<MetricRow> pending;
  const double t_start = wall_seconds();
  double window_tokens = 0, window_start = t_start, last_tps = 0, last_loss = NAN, last_acc = NAN;
  int64_t tokens_total = 0;
  double train_seconds = 0;  // optimiser steps only (no evaluation, checkpoints or logging)
  const int64_t first_step = state.step;

  auto run_eval_and_checkpoint = [&](int64_t step_done) {
    auto ev = evaluate_tokens(model, test_set, cfg.at("eval_batch_size"), device);
    json extra;
    {
      torch::NoGradGuard no_grad;
      model.module->eval();
      extra = task->test_metrics(model.forward, test_set, device);
      model.module->train();
    }
    const double now = wall_seconds() - t_start;
    pending.push_back({state.run_id, step_done, "test", "loss", ev.loss, now});
    pending.push_back({state.run_id, step_done, "test", "accuracy", ev.accuracy, now});
    for (auto it = extra.begin(); it != extra.end(); ++it)
      pending.push_back({state.run_id, step_done, "test", it.key(), it.value().get<double>(), now});
    last_acc = ev.accuracy;
    state.best_test_accuracy = std::max(state.best_test_accuracy, ev.accuracy);
    result.final_test_accuracy = ev.accuracy;
    result.final_test_loss = ev.loss;
    db.add_metrics(pending);
    pending.clear();
    state.step = step_done;
    save_checkpoint(result.out_dir, cfg, model, optimizer.get(), state);
    db.set_run_last_step(state.run_id, step_done);
    return ev.accuracy;
  };

  int64_t step = state.step;
  try {
    model.module->train();
    while (step < steps) {
      const double step_start = wall_seconds();
      const double cur_lr = cosine_lr(step, steps, warmup, lr, min_ratio);
      set_lr(*optimizer, cur_lr);
      std::vector<TokenExample> fresh;
      std::vector<const TokenExample*> batch_examples;
      if (n_train > 0) {
        for (int64_t i : sampler.batch(step, batch_size)) batch_examples.push_back(&train_set[i]);
      } else {
        fresh = task->examples(Split::train, batch_size, seed + static_cast<uint64_t>(step * batch_size));
        for (auto& e : fresh) batch_examples.push_back(&e);
      }
      auto batch = collate(batch_examples, device);
      optimizer->zero_grad();
      auto logits = model.forward(batch.input_ids);
      auto loss = token_loss(logits, batch.labels);
      auto aux = model.aux_loss();
      auto total = aux.defined() ? loss + aux : loss;
      total.backward();
      const double loss_value = loss.item<double>();
      if (!std::isfinite(loss_value))
        throw Error("loss is " + std::to_string(loss_value) + " at step " + std::to_string(step + 1) +
                    " (run " + std::to_string(state.run_id) + "); lower lr or check the model");
      double grad_norm = 0;
      if (clip > 0) grad_norm = torch::nn::utils::clip_grad_norm_(model.module->parameters(), clip);
      optimizer->step();
      ++step;
      train_seconds += wall_seconds() - step_start;
      const int64_t step_tokens = batch.input_ids.numel();
      tokens_total += step_tokens;
      window_tokens += step_tokens;
      last_loss = loss_value;

      const double now = wall_seconds();
      if (step % log_every == 0 || step == steps) {
        last_tps = window_tokens / std::max(1e-9, now - window_start);
        window_tokens = 0;
        window_start = now;
        const double elapsed = now - t_start;
        pending.push_back({state.run_id, step, "train", "loss", loss_value, elapsed});
        pending.push_back({state.run_id, step, "train", "lr", cur_lr, elapsed});
        pending.push_back({state.run_id, step, "train", "tokens_per_s", last_tps, elapsed});
        if (clip > 0) pending.push_back({state.run_id, step, "train", "grad_norm", grad_norm, elapsed});
        if (aux.defined()) pending.push_back({state.run_id, step, "train", "aux_loss", aux.item<double>(), elapsed});
      }
      bool stop = false;
      const bool pause = opt.stop_after > 0 && step - first_step >= opt.stop_after && step < steps;
      if ((eval_every > 0 && step % eval_every == 0) || step == steps || pause) {
        const double acc = run_eval_and_checkpoint(step);
        if (early_stop > 0 && acc > early_stop) stop = true;
      }
      if (pause && !stop) {
        db.set_run_status(state.run_id, "stopped", "stopped after " + std::to_string(step) + " steps; --resume continues");
        if (!opt.quiet) std::printf("[run %lld] stopped at step %lld (checkpoint in %s)\n", (long long)state.run_id,
                                    (long long)step, result.out_dir.c_str());
        result.steps = step;
        result.run_id = state.run_id;
        result.best_test_accuracy = state.best_test_accuracy;
        result.final_train_loss = last_loss;
        result.wall_s = wall_seconds() - t_start;
        result.tokens_per_s = tokens_total / std::max(1e-9, train_seconds);
        return result;
      }
      if (!opt.quiet && (step % log_every == 0 || step == steps || stop)) {
        const double elapsed = now - t_start;
        const double eta = (steps - step) * elapsed / std::max<int64_t>(1, step - first_step);
        std::printf("[run %lld] step %lld/%lld | loss %.4f | test acc %s | lr %.2e | %.0f tok/s | ETA %s\n",
                    (long long)state.run_id, (long long)step, (long long)steps, loss_value,
                    std::isnan(last_acc) ? "-" : std::to_string(last_acc).substr(0, 5).c_str(), cur_lr,
                    last_tps, format_duration(eta).c_str());
        std::fflush(stdout);
      }
      if (stop) {
        if (!opt.quiet) std::printf("[run %lld] early stop: test accuracy %.4f > %.4f\n",
                                    (long long)state.run_id, last_acc, early_stop);
        break;
      }
    }
  } catch (const std::exception& e) {
    db.set_run_status(state.run_id, "failed", e.what());
    throw;
  }
  result.wall_s = wall_seconds() - t_start;
  result.steps = step;
  result.best_test_accuracy = state.best_test_accuracy;
  result.final_train_loss = last_loss;
  result.tokens_per_s = tokens_total / std::max(1e-9, train_seconds);
  db.add_metrics({{state.run_id, step, "summary", "best_test_accuracy", result.best_test_accuracy, result.wall_s},
                  {state.run_id, step, "summary", "wall_s", result.wall_s, result.wall_s},
                  {state.run_id, step, "summary", "tokens_per_s", result.tokens_per_s, result.wall_s}});
  db.set_run_status(state.run_id, "completed");
  return result;
}

}  // namespace mnemo
