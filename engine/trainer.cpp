#include <torch/torch.h>
#include <unistd.h>

#include "engine/trainer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <optional>
#include <random>

#include "core/defaults.h"
#include "core/progress.h"
#include "core/signals.h"
#include "results/db.h"
#include "runtime/device.h"
#include "engine/checkpoint.h"
#include "engine/run_config.h"
#include "engine/run_lifecycle.h"
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

// `train --resume` of a completed run: its figures as recorded, nothing written.
TrainResult completed_result(const ResultsDB& db, const RunInfo& run, const std::string& out_dir, bool quiet) {
  TrainResult r;
  r.run_id = run.id;
  r.steps = run.last_step;
  r.out_dir = out_dir;
  r.already_completed = true;
  r.best_test_accuracy = r.final_test_accuracy = r.final_test_loss = r.final_train_loss = NAN;
  for (const MetricRow& m : db.metrics(run.id)) {  // ordered by step
    if (m.split == "summary" && m.name == "best_test_accuracy") r.best_test_accuracy = m.value;
    if (m.split == "summary" && m.name == "wall_s") r.wall_s = m.value;
    if (m.split == "summary" && m.name == "tokens_per_s") r.tokens_per_s = m.value;
    if (m.split == "test" && m.name == "accuracy") r.final_test_accuracy = m.value;
    if (m.split == "test" && m.name == "loss") r.final_test_loss = m.value;
    if (m.split == "train" && m.name == "loss") r.final_train_loss = m.value;
  }
  if (!quiet)
    std::printf("[run %lld] already completed at step %lld: nothing to do (results unchanged)\n", (long long)run.id,
                (long long)run.last_step);
  return r;
}

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
  const int64_t n_train = cfg.at("n_train"), n_test = cfg.at("n_test"), eval_batch_size = cfg.at("eval_batch_size");
  if (n_train < 0 || n_test < 0)
    throw Error("n_train and n_test must be >= 0 (n_train 0 draws fresh examples every step; n_test 0: no test set)");
  if (eval_batch_size <= 0) throw Error("eval_batch_size must be > 0, got " + std::to_string(eval_batch_size));
  const bool has_test = n_test > 0;  // no test set: no test rows, no best_test_accuracy

  // Resume: the newest complete checkpoint (one a crashed write left is put back in place); its
  // config must be the same run.
  TrainerState state;
  bool resuming = false;
  if (opt.resume && has_checkpoint(result.out_dir)) {
    const std::string note = recover_checkpoint(result.out_dir);
    if (!note.empty() && !opt.quiet) std::printf("%s: %s\n", result.out_dir.c_str(), note.c_str());
    json saved = load_checkpoint_config(result.out_dir), saved_resolved;
    try {
      saved_resolved = resolve_run_config(saved);
    } catch (const Error& e) {
      throw Error("--resume: the checkpoint in " + result.out_dir + " has a configuration this mnemo cannot use: " +
                  e.what());
    }
    if (config_hash(saved_resolved) != hash)
      throw Error("--resume: the configuration differs from the checkpoint in " + result.out_dir);
    state = load_trainer_state(result.out_dir);
    resuming = true;
  }

  ResultsDB db(opt.db_path);
  std::optional<RunInfo> adopted;
  if (resuming) {
    auto run = db.run(state.run_id);
    if (!run) throw Error("--resume: run " + std::to_string(state.run_id) + " not found in " + opt.db_path);
    if (run->config_hash != hash)
      throw Error("--resume: run " + std::to_string(state.run_id) + " in " + opt.db_path +
                  " is another run (its config differs); the checkpoint was logged to " +
                  (state.db_path.empty() ? std::string("another database") : state.db_path));
    if (run->status == "completed") return completed_result(db, *run, result.out_dir, opt.quiet);
    refuse_if_running_elsewhere(db, *run);
  } else if (opt.resume) {
    adopted = adoptable_run(db, result.out_dir, hash);
    if (adopted)
      std::printf("no checkpoint in %s: restarting run %lld (%s) from step 0\n", result.out_dir.c_str(),
                  (long long)adopted->id, adopted->status.c_str());
    else
      std::printf("no checkpoint in %s: starting a new run\n", result.out_dir.c_str());
  }

  // Everything checkable is checked before the run row is created (or a resumed one set running).
  check_out_dir_writable(result.out_dir);
  check_example_memory(*task, n_train, n_test, seed);

  torch::manual_seed(seed);
  ModelConfig mc = model_config_from_json(cfg);
  mc.vocab_size = task->vocab_size();
  Backbone model = make_backbone(task_backbone(*task), mc);
  model.module->to(device);
  auto optimizer = make_adamw(*model.module, cfg);
  if (resuming) {
    check_checkpoint_model(result.out_dir, model);
    load_weights(result.out_dir, model);
    model.module->to(device);
    load_optimizer(result.out_dir, *optimizer);
  }
  std::vector<TokenExample> train_set;
  if (n_train > 0) train_set = task->examples(Split::train, n_train, seed);
  const auto test_set = has_test ? task->examples(Split::test, n_test, seed) : std::vector<TokenExample>{};
  EpochSampler sampler(std::max<int64_t>(1, n_train), seed);

  if (stop_requested()) {  // a signal before anything was recorded: nothing to undo
    result.stopped = true;
    result.stop_signal = stop_signal();
    result.run_id = resuming ? state.run_id : 0;
    result.steps = state.step;
    return result;
  }
  if (resuming) {
    if (state.db_path != opt.db_path && !state.db_path.empty())
      std::printf("note: checkpoint was logged to %s; continuing in %s\n", state.db_path.c_str(), opt.db_path.c_str());
    db.delete_metrics_after(state.run_id, state.step);
    db.set_run_status(state.run_id, "running");
  } else if (adopted) {
    state.run_id = adopted->id;
    state.db_path = opt.db_path;
    db.delete_metrics_after(state.run_id, -1);
    db.set_run_last_step(state.run_id, 0);
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
  // From here on the row says 'running': any error marks it failed with a one-line reason.
  try {
    db.set_run_process(state.run_id, static_cast<int64_t>(::getpid()), hostname());
    const int64_t warmup = static_cast<int64_t>(std::llround(cfg.at("warmup_frac").get<double>() * steps));
    const double lr = cfg.at("lr"), min_ratio = cfg.at("min_lr_ratio"), clip = cfg.at("grad_clip");
    const double early_stop = cfg.at("early_stop_acc");
    std::vector<MetricRow> pending;
    // Times and tokens add up over invocations: the checkpoint carries the totals so far.
    const double t_start = wall_seconds(), prior_wall = state.wall_s, prior_train = state.train_s;
    const int64_t prior_tokens = state.train_tokens;
    auto elapsed = [&] { return prior_wall + (wall_seconds() - t_start); };
    double window_tokens = 0, window_start = t_start, last_tps = 0, last_loss = NAN, last_acc = NAN;
    int64_t tokens_total = 0;  // this invocation
    double train_seconds = 0;  // optimiser steps only (no evaluation, checkpoints or logging)
    const int64_t first_step = state.step;
    int64_t saved_step = resuming ? state.step : -1;  // step of the checkpoint on disk
    if (!has_test) result.best_test_accuracy = result.final_test_accuracy = result.final_test_loss = NAN;

    auto checkpoint_now = [&](int64_t step_done) {
      db.add_metrics(pending);
      pending.clear();
      state.step = step_done;
      state.wall_s = elapsed();
      state.train_s = prior_train + train_seconds;
      state.train_tokens = prior_tokens + tokens_total;
      save_checkpoint(result.out_dir, cfg, model, optimizer.get(), state);
      db.set_run_last_step(state.run_id, step_done);
      saved_step = step_done;
    };
    auto run_eval_and_checkpoint = [&](int64_t step_done) {
      double accuracy = NAN;
      if (has_test) {
        auto ev = evaluate_tokens(model, test_set, eval_batch_size, device);
        json extra;
        {
          torch::NoGradGuard no_grad;
          model.module->eval();
          extra = task->test_metrics(model.forward, test_set, device);
          model.module->train();
        }
        const double now = elapsed();
        pending.push_back({state.run_id, step_done, "test", "loss", ev.loss, now});
        pending.push_back({state.run_id, step_done, "test", "accuracy", ev.accuracy, now});
        for (auto it = extra.begin(); it != extra.end(); ++it)
          pending.push_back({state.run_id, step_done, "test", it.key(), it.value().get<double>(), now});
        accuracy = last_acc = ev.accuracy;
        state.best_test_accuracy = std::max(state.best_test_accuracy, ev.accuracy);
        result.final_test_accuracy = ev.accuracy;
        result.final_test_loss = ev.loss;
      }
      checkpoint_now(step_done);
      return accuracy;
    };
    auto fill_result = [&](int64_t step_done) {
      result.steps = step_done;
      if (has_test) result.best_test_accuracy = state.best_test_accuracy;
      result.final_train_loss = last_loss;
      result.wall_s = elapsed();
      result.tokens_per_s = double(prior_tokens + tokens_total) / std::max(1e-9, prior_train + train_seconds);
    };
    // Checkpointed, status 'stopped' (resumable).
    auto finish_stopped = [&](int64_t step_done, const std::string& why) {
      if (saved_step != step_done) checkpoint_now(step_done);
      db.set_run_status(state.run_id, "stopped", why + " at step " + std::to_string(step_done) + "; --resume continues");
      if (!opt.quiet)
        std::printf("[run %lld] stopped at step %lld (%s; checkpoint in %s)\n", (long long)state.run_id,
                    (long long)step_done, why.c_str(), result.out_dir.c_str());
      result.stopped = true;
      fill_result(step_done);
    };

    int64_t step = state.step;
    model.module->train();
    while (step < steps) {
      if (stop_requested()) {  // SIGINT / SIGTERM: between two steps
        finish_stopped(step, std::string("interrupted by ") + stop_signal_name());
        result.stop_signal = stop_signal();
        return result;
      }
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
        const double at = elapsed();
        pending.push_back({state.run_id, step, "train", "loss", loss_value, at});
        pending.push_back({state.run_id, step, "train", "lr", cur_lr, at});
        pending.push_back({state.run_id, step, "train", "tokens_per_s", last_tps, at});
        if (clip > 0) pending.push_back({state.run_id, step, "train", "grad_norm", grad_norm, at});
        if (aux.defined()) pending.push_back({state.run_id, step, "train", "aux_loss", aux.item<double>(), at});
      }
      bool stop = false;
      const bool pause = opt.stop_after > 0 && step - first_step >= opt.stop_after && step < steps;
      if ((eval_every > 0 && step % eval_every == 0) || step == steps || pause) {
        const double acc = run_eval_and_checkpoint(step);
        if (early_stop > 0 && acc > early_stop) stop = true;  // false for NaN (no test set)
      }
      if (pause && !stop) {
        finish_stopped(step, "stopped by --stop-after");
        return result;
      }
      if (!opt.quiet && (step % log_every == 0 || step == steps || stop)) {
        const double run_s = now - t_start;
        const double eta = (steps - step) * run_s / std::max<int64_t>(1, step - first_step);
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
    if (saved_step != step) checkpoint_now(step);  // a resume of a run stopped at its last step
    fill_result(step);
    std::vector<MetricRow> summary = {{state.run_id, step, "summary", "wall_s", result.wall_s, result.wall_s},
                                      {state.run_id, step, "summary", "tokens_per_s", result.tokens_per_s, result.wall_s}};
    if (has_test)
      summary.push_back({state.run_id, step, "summary", "best_test_accuracy", result.best_test_accuracy, result.wall_s});
    db.add_metrics(summary);
    db.set_run_status(state.run_id, "completed");
  } catch (const std::exception& e) {
    try {
      db.set_run_status(state.run_id, "failed", error_line(e));
    } catch (const std::exception&) {
    }
    throw;
  }
  return result;
}

}  // namespace mnemo
