#include <torch/torch.h>
#include <unistd.h>

#include "engine/training/trainer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <csignal>
#include <optional>

#include "core/defaults.h"
#include "core/progress.h"
#include "core/signals.h"
#include "core/system_info.h"
#include "engine/io/checkpoint.h"
#include "engine/training/data_source.h"
#include "engine/training/distributed.h"
#include "engine/training/flops.h"
#include "engine/training/objective.h"
#include "engine/training/optim.h"
#include "engine/config/run_config.h"
#include "engine/training/run_lifecycle.h"
#include "engine/evaluation/token_eval.h"
#include "results/db.h"
#include "runtime/device.h"
#include "runtime/mixed_precision.h"
#include "runtime/model.h"
#include "tasks/lm_task.h"
#include "tasks/mad_tasks.h"
#include "tasks/task.h"

namespace mnemo {
namespace fs = std::filesystem;

namespace {

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
    if (m.split == "test" || m.split == "val") r.final_eval[m.name] = m.value;
  }
  if (!quiet)
    std::printf("[run %lld] already completed at step %lld: nothing to do (results unchanged)\n", (long long)run.id,
                (long long)run.last_step);
  return r;
}

// The data a run trains and is judged on: a token task's examples, or a corpus's token shards.
struct RunData {
  std::shared_ptr<Task> task;
  const TokenTask* token_task = nullptr;
  const LmTask* lm_task = nullptr;
  LmData lm;  // lm_task only
  int64_t vocab_size = 0;
  std::string backbone = "language_model";
};

RunData open_run_data(const json& cfg, bool quiet) {
  RunData d;
  d.task = TaskRegistry::instance().make(cfg.at("task"), task_params_of(cfg));
  d.token_task = dynamic_cast<const TokenTask*>(d.task.get());
  d.lm_task = dynamic_cast<const LmTask*>(d.task.get());
  if (d.token_task) {
    d.vocab_size = d.token_task->vocab_size();
    d.backbone = task_backbone(*d.token_task);
  } else if (d.lm_task && d.task->name() == "lm") {
    d.lm = d.lm_task->prepare([quiet](const std::string& line) {
      if (!quiet) std::printf("%s\n", line.c_str()), std::fflush(stdout);
    });
    d.vocab_size = d.lm.tokenizer->vocab_size();
  } else {
    throw Error("task '" + cfg.at("task").get<std::string>() + "' cannot be trained (see `mnemo tasks`)");
  }
  return d;
}

std::unique_ptr<DataSource> make_source(const RunData& d, const json& cfg, const torch::Device& device) {
  const int64_t batch = cfg.at("batch_size"), accum = cfg.at("grad_accum");
  const uint64_t seed = cfg.at("seed").get<uint64_t>();
  if (d.token_task) return make_token_task_source(*d.token_task, cfg.at("n_train"), batch, accum, seed, device);
  CorpusWindows w;
  w.seq_len = d.lm_task->seq_len();
  w.batch_size = batch;
  w.grad_accum = accum;
  w.seed = seed;
  w.sampler = cfg.at("sampler");
  w.packing = cfg.at("packing");
  w.reset_at_bos = cfg.at("reset_state_at_bos");
  w.bos_id = d.lm.tokenizer->bos_id();
  w.pad_id = d.lm.tokenizer->pad_id();
  return make_corpus_source(*d.lm.train, w, device);
}

std::unique_ptr<Objective> make_objective(const RunData& d, const json& cfg, const torch::Device& device) {
  if (d.token_task)
    return make_token_objective(*d.token_task, cfg.at("n_test"), cfg.at("seed").get<uint64_t>(),
                                cfg.at("eval_batch_size"), device);
  return make_lm_objective(d.lm, d.lm_task->seq_len(), cfg.at("val_tokens"), cfg.at("eval_batch_size"), device);
}

// One optimiser step over grad_accum micro-batches: Σ over micro-batches of (summed token loss /
// the step's labelled positions) is the loss of the whole batch, so accumulation equals one big batch.
// Data-parallel (dist set): each rank's loss is its share of that sum (its labelled positions' losses over the
// labelled positions of every rank), so the ranks' summed gradients are the whole batch's gradient.
struct StepResult {
  double loss = NAN, aux = NAN, grad_norm = 0;
  int64_t tokens = 0;  // every rank's
  double data_s = 0;   // seconds spent drawing the micro-batches (the data-wait share of a step)
  bool stop = false;   // a rank was asked to stop (SIGINT / SIGTERM) during the step
};
StepResult optimiser_step(Backbone& model, torch::optim::Optimizer& optimizer, DataSource& data, int64_t step,
                          int64_t accum, double clip, const torch::Device& device, Precision precision,
                          Distributed* dist) {
  StepResult r;
  const int world = dist ? dist->world_size() : 1;
  std::vector<TrainBatch> micro;
  int64_t labelled = 0;  // over the micro-batches and every rank's share of them
  const double t0 = wall_seconds();
  for (int64_t m = 0; m < accum; ++m) {
    micro.push_back(data.batch(step, m));
    labelled += micro.back().labelled_all_ranks >= 0 ? micro.back().labelled_all_ranks : micro.back().labelled;
  }
  r.data_s = wall_seconds() - t0;
  optimizer.zero_grad();
  double loss_sum = 0, aux_sum = 0;
  bool has_aux = false;
  for (size_t m = 0; m < micro.size(); ++m) {
    const TrainBatch& b = micro[m];
    torch::Tensor loss, aux;
    {
      const AutocastScope autocast(device, precision);  // forward and loss; backward outside (as torch.amp)
      auto logits = model.forward(b.input_ids);
      // One rank, accum 1: the mean, as before gradient accumulation existed (identical numbers); else the sum over the step's labels.
      loss = accum == 1 && world == 1 ? token_loss(logits, b.labels)
                                      : token_loss_sum(logits, b.labels) / double(std::max<int64_t>(1, labelled));
      aux = model.aux_loss();
    }
    auto total = aux.defined() ? loss + aux / double(accum * world) : loss;
    if (dist && m + 1 == micro.size()) dist->begin_gradient_sync(step);  // buckets all-reduce during this backward
    total.backward();
    loss_sum += loss.item<double>();
    if (aux.defined()) aux_sum += aux.item<double>() / double(accum), has_aux = true;
    r.tokens += b.tokens;
  }
  if (dist) {  // gradients summed over ranks, then the step's figures and stop requests (one small message)
    dist->finish_gradient_sync(1.0);
    const auto c = dist->all_reduce_sum({loss_sum, aux_sum / world, has_aux ? 1.0 : 0.0, double(r.tokens),
                                         stop_requested() ? 1.0 : 0.0},
                                        step, "step's control message");
    loss_sum = c[0], aux_sum = c[1], has_aux = c[2] > 0, r.tokens = static_cast<int64_t>(c[3]), r.stop = c[4] > 0;
  }
  r.loss = loss_sum;
  if (has_aux) r.aux = aux_sum;
  if (!std::isfinite(r.loss))
    throw Error("loss is " + std::to_string(r.loss) + " at step " + std::to_string(step + 1) +
                "; lower lr or check the model");
  if (clip > 0) r.grad_norm = torch::nn::utils::clip_grad_norm_(model.module->parameters(), clip);
  optimizer.step();
  return r;
}

}  // namespace

TrainResult train(const json& user_config, const TrainOptions& opt) {
  const json cfg = resolve_run_config(user_config);
  const std::string hash = config_hash(cfg);
  TrainResult result;
  result.out_dir = opt.out_dir.empty()
                       ? (fs::path(kDefaultRunsDir) / (cfg.at("model").get<std::string>() + "-" +
                                                       cfg.at("task").get<std::string>() + "-" + hash)).string()
                       : opt.out_dir;
  torch::Device device = resolve_device(opt.device.empty() ? cfg.at("device").get<std::string>() : opt.device);
  const int64_t steps = cfg.at("steps"), accum = cfg.at("grad_accum"), eval_every = cfg.at("eval_every");
  const int64_t log_every = std::max<int64_t>(1, cfg.at("log_every").get<int64_t>());
  const uint64_t seed = cfg.at("seed").get<uint64_t>();
  const Precision precision = parse_precision(cfg.at("precision"));
  const DefaultDtypeScope dtype_scope(precision);  // fp64: the model is built and trained in float64

  // Data-parallel: join the job (every rank runs this function with the same config); rank 0 alone writes.
  std::unique_ptr<Distributed> dist;
  const int world = opt.dist.world_size;
  if (opt.dist.distributed()) {
    const int64_t batch = cfg.at("batch_size");
    if (batch % world != 0)
      throw Error("batch_size " + std::to_string(batch) + " is not a multiple of the " + std::to_string(world) +
                  " ranks (batch_size is the whole micro-batch; each rank trains on batch_size / world_size rows)");
    if (device.is_cuda()) device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(opt.dist.local_rank));
    dist = std::make_unique<Distributed>(opt.dist, device, opt.dist_timeout);
    dist->check_same_config(hash);
    result.dist_backend = dist->backend();
  }
  const bool main_rank = !dist || dist->is_main();
  const bool quiet = opt.quiet || !main_rank;
  result.world_size = world;
  result.rank = opt.dist.rank;

  // Resume: the newest complete checkpoint (one a crashed write left is put back in place, by rank 0); its
  // config must be the same run. Every rank reads it (a job on several hosts needs out_dir on a shared file system).
  TrainerState state;
  bool resuming = false;
  if (opt.resume && main_rank && has_checkpoint(result.out_dir)) {
    const std::string note = recover_checkpoint(result.out_dir);
    if (!note.empty() && !quiet) std::printf("%s: %s\n", result.out_dir.c_str(), note.c_str());
  }
  if (dist && opt.resume) dist->barrier("checkpoint recovery");
  if (opt.resume && has_checkpoint(result.out_dir)) {
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

  ResultsDB db(main_rank ? opt.db_path : std::string(":memory:"));  // other ranks: nothing is written
  std::optional<RunInfo> adopted;
  bool completed_already = false;
  std::optional<RunInfo> completed_run;
  if (!main_rank) {
  } else if (resuming) {
    auto run = db.run(state.run_id);
    if (!run) throw Error("--resume: run " + std::to_string(state.run_id) + " not found in " + opt.db_path);
    if (run->config_hash != hash)
      throw Error("--resume: run " + std::to_string(state.run_id) + " in " + opt.db_path +
                  " is another run (its config differs); the checkpoint was logged to " +
                  (state.db_path.empty() ? std::string("another database") : state.db_path));
    if (run->status == "completed") {
      completed_already = true;
      completed_run = run;
    } else {
      refuse_if_running_elsewhere(db, *run);
    }
  } else if (opt.resume) {
    adopted = adoptable_run(db, result.out_dir, hash);
    if (adopted)
      std::printf("no checkpoint in %s: restarting run %lld (%s) from step 0\n", result.out_dir.c_str(),
                  (long long)adopted->id, adopted->status.c_str());
    else
      std::printf("no checkpoint in %s: starting a new run\n", result.out_dir.c_str());
  }

  if (dist) {  // every rank resumes from the same step, or none does; a completed run ends every rank
    const auto c = dist->all_reduce_sum({resuming ? 1.0 : 0.0, double(state.step), completed_already ? 1.0 : 0.0},
                                        -1, "resume check");
    if (c[0] != 0 && (c[0] != world || c[1] != double(world) * double(state.step)))
      throw Error("rank " + std::to_string(opt.dist.rank) + (resuming ? " resumes from step " + std::to_string(state.step)
                                                                      : std::string(" sees no checkpoint")) +
                  " in " + result.out_dir + " but another rank does not: every rank must read the same checkpoint");
    if (c[2] > 0) completed_already = true;
  }
  if (completed_already) {
    if (completed_run) return completed_result(db, *completed_run, result.out_dir, quiet);
    result.already_completed = true;
    result.run_id = state.run_id;
    result.steps = state.step;
    return result;
  }

  // ---- the parts, built and checked before the run row is created (or a resumed one set running) ----
  if (main_rank) check_out_dir_writable(result.out_dir);
  if (dist && !main_rank) dist->barrier("data preparation");  // rank 0 builds the corpus's token shards first
  RunData data = open_run_data(cfg, quiet);  // builds or reuses a corpus's token shards
  if (dist && main_rank) dist->barrier("data preparation");
  if (data.token_task) check_example_memory(*data.token_task, cfg.at("n_train"), cfg.at("n_test"), seed);

  torch::manual_seed(seed);
  ModelConfig mc = model_config_from_json(cfg);
  mc.vocab_size = data.vocab_size;
  Backbone model = make_backbone(data.backbone, mc);
  model.module->to(device);
  auto optimizer = make_adamw(*model.module, cfg);
  if (resuming) {
    check_checkpoint_model(result.out_dir, model);
    load_weights(result.out_dir, model);
    model.module->to(device);
    load_optimizer(result.out_dir, *optimizer);
  }
  if (dist) {
    dist->broadcast_module(*model.module);  // identical starting weights (rank 0's)
    dist->attach_gradients(model.module->parameters(), opt.dist_bucket_bytes, opt.dist_overlap);
  }
  auto source = make_rank_share(make_source(data, cfg, device), opt.dist.rank, world);
  auto objective = make_objective(data, cfg, device);
  const bool has_eval = objective->has_eval();
  const std::string eval_split = objective->eval_split();
  std::string primary = cfg.at("primary_metric");
  if (primary.empty()) primary = objective->default_primary();
  const bool maximise = higher_is_better(primary);
  const bool is_lm = data.lm_task != nullptr;
  const int64_t context = is_lm ? data.lm_task->seq_len() : 0;
  state.primary_metric = primary;

  if (!dist && stop_requested()) {  // a signal before anything was recorded: nothing to undo
    result.stopped = true;
    result.stop_signal = stop_signal();
    result.run_id = resuming ? state.run_id : 0;
    result.steps = state.step;
    return result;
  }
  if (!main_rank) {
  } else if (resuming) {
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
    json recorded = cfg;
    if (dist) {  // the job's shape beside the config (not in its hash: the same run on any number of ranks)
      recorded["world_size"] = world;
      recorded["rank_batch_size"] = cfg.at("batch_size").get<int64_t>() / world;
      recorded["global_batch_size"] = cfg.at("batch_size").get<int64_t>() * accum;
      recorded["dist_backend"] = dist->backend();
      recorded["dist_bucket_bytes"] = opt.dist_bucket_bytes;
      recorded["dist_overlap"] = opt.dist_overlap;
    }
    r.config_json = recorded.dump();
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
  if (dist) state.run_id = static_cast<int64_t>(dist->all_reduce_sum({main_rank ? double(state.run_id) : 0.0}, -1,
                                                                      "run start")[0]);
  result.run_id = state.run_id;
  result.primary_metric = primary;
  // From here on the row says 'running': any error marks it failed with a one-line reason.
  try {
    if (main_rank) db.set_run_process(state.run_id, static_cast<int64_t>(::getpid()), hostname());
    const int64_t warmup_steps = cfg.at("warmup_steps");
    const int64_t warmup = warmup_steps >= 0 ? warmup_steps
                                             : static_cast<int64_t>(std::llround(cfg.at("warmup_frac").get<double>() * steps));
    const double lr = cfg.at("lr"), min_ratio = cfg.at("min_lr_ratio"), clip = cfg.at("grad_clip");
    const double early_stop = cfg.at("early_stop_acc");
    std::vector<MetricRow> pending;
    // Times and tokens add up over invocations: the checkpoint carries the totals so far.
    const double t_start = wall_seconds(), prior_wall = state.wall_s, prior_train = state.train_s;
    const int64_t prior_tokens = state.train_tokens;
    auto elapsed = [&] { return prior_wall + (wall_seconds() - t_start); };
    double window_tokens = 0, window_start = t_start, last_tps = 0, last_loss = NAN, last_primary = NAN;
    int64_t tokens_total = 0;  // this invocation
    double train_seconds = 0;  // optimiser steps only (no evaluation, checkpoints or logging)
    double data_seconds = 0;   // of which drawing batches
    const int64_t first_step = state.step;
    int64_t saved_step = resuming ? state.step : -1;  // step of the checkpoint on disk
    if (!has_eval) result.best_test_accuracy = result.final_test_accuracy = result.final_test_loss = NAN;
    if (is_lm) result.best_test_accuracy = result.final_test_accuracy = NAN;  // no accuracy in language modelling
    auto tokens_seen = [&] { return prior_tokens + tokens_total; };

    // ---- checkpoint ----
    auto checkpoint_now = [&](int64_t step_done) {
      saved_step = step_done;
      if (!main_rank) return pending.clear();
      db.add_metrics(pending);
      pending.clear();
      state.step = step_done;
      state.wall_s = elapsed();
      state.train_s = prior_train + train_seconds;
      state.train_tokens = tokens_seen();
      state.data_position = source->position(step_done);
      save_checkpoint(result.out_dir, cfg, model, optimizer.get(), state);
      db.set_run_last_step(state.run_id, step_done);
      saved_step = step_done;
    };
    // ---- periodic evaluation (held-out metrics, best_<primary>) then checkpoint ----
    auto evaluate_and_checkpoint = [&](int64_t step_done) {
      if (has_eval && main_rank) {
        const Metrics m = [&] {
          const AutocastScope autocast(device, precision);  // evaluation in the run's precision, as nanoGPT's
          return objective->evaluate(model);
        }();
        const double now = elapsed();
        for (const auto& [name, value] : m) {
          pending.push_back({state.run_id, step_done, eval_split, name, value, now});
          result.final_eval[name] = value;
          if (name == primary) last_primary = value;
        }
        if (is_lm) pending.push_back({state.run_id, step_done, eval_split, "tokens", double(tokens_seen()), now});
        if (!result.final_eval.contains(primary))
          throw Error("primary_metric '" + primary + "' is not a metric of task '" + cfg.at("task").get<std::string>() +
                      "'; it logs: " + result.final_eval.dump());
        if (!std::isfinite(state.best_primary) ||
            (maximise ? last_primary > state.best_primary : last_primary < state.best_primary))
          state.best_primary = last_primary;
        if (result.final_eval.contains("accuracy")) {
          result.final_test_accuracy = result.final_eval["accuracy"];
          state.best_test_accuracy = std::max(state.best_test_accuracy, result.final_test_accuracy);
        }
        if (result.final_eval.contains("loss")) result.final_test_loss = result.final_eval["loss"];
      }
      checkpoint_now(step_done);
    };
    auto fill_result = [&](int64_t step_done) {
      result.steps = step_done;
      if (has_eval) {
        if (result.final_eval.contains("accuracy")) result.best_test_accuracy = state.best_test_accuracy;
        result.best_primary = state.best_primary;
        result.final_primary = last_primary;
      }
      result.final_train_loss = last_loss;
      result.wall_s = elapsed();
      result.tokens_per_s = double(tokens_seen()) / std::max(1e-9, prior_train + train_seconds);
    };
    // Checkpointed, status 'stopped' (resumable).
    auto finish_stopped = [&](int64_t step_done, const std::string& why) {
      if (saved_step != step_done) checkpoint_now(step_done);
      if (main_rank)
        db.set_run_status(state.run_id, "stopped", why + " at step " + std::to_string(step_done) + "; --resume continues");
      if (!quiet)
        std::printf("[run %lld] stopped at step %lld (%s; checkpoint in %s)\n", (long long)state.run_id,
                    (long long)step_done, why.c_str(), result.out_dir.c_str());
      result.stopped = true;
      fill_result(step_done);
    };

    // ---- the loop ----
    int64_t step = state.step;
    bool job_stop = false;  // data-parallel: a rank was signalled (the step's control message says so to all)
    model.module->train();
    while (step < steps) {
      if (dist ? job_stop : stop_requested()) {  // SIGINT / SIGTERM: between two steps
        finish_stopped(step, std::string("interrupted by ") + (stop_requested() ? stop_signal_name() : "a signal to another rank"));
        result.stop_signal = stop_requested() ? stop_signal() : SIGTERM;
        return result;
      }
      const double step_start = wall_seconds();
      const double cur_lr = cosine_lr(step, steps, warmup, lr, min_ratio);
      set_lr(*optimizer, cur_lr);
      StepResult sr;
      try {
        sr = optimiser_step(model, *optimizer, *source, step, accum, clip, device, precision, dist.get());
      } catch (const Error& e) {
        throw Error(std::string(e.what()) + " (run " + std::to_string(state.run_id) + ")");
      }
      ++step;
      train_seconds += wall_seconds() - step_start;
      data_seconds += sr.data_s;
      tokens_total += sr.tokens;
      window_tokens += double(sr.tokens);
      last_loss = sr.loss;
      job_stop = sr.stop;

      const double now = wall_seconds();
      if (step % log_every == 0 || step == steps) {
        last_tps = window_tokens / std::max(1e-9, now - window_start);
        window_tokens = 0;
        window_start = now;
        const double at = elapsed();
        pending.push_back({state.run_id, step, "train", "loss", sr.loss, at});
        for (const auto& [name, value] : objective->train_metrics(sr.loss))
          pending.push_back({state.run_id, step, "train", name, value, at});
        pending.push_back({state.run_id, step, "train", "lr", cur_lr, at});
        pending.push_back({state.run_id, step, "train", "tokens_per_s", last_tps, at});
        if (is_lm) pending.push_back({state.run_id, step, "train", "tokens", double(tokens_seen()), at});
        if (clip > 0) pending.push_back({state.run_id, step, "train", "grad_norm", sr.grad_norm, at});
        if (std::isfinite(sr.aux)) pending.push_back({state.run_id, step, "train", "aux_loss", sr.aux, at});
      }
      bool stop = false;
      const bool pause = opt.stop_after > 0 && step - first_step >= opt.stop_after && step < steps;
      if ((eval_every > 0 && step % eval_every == 0) || step == steps || pause) {
        evaluate_and_checkpoint(step);
        // Early stop on accuracy (Zoology's 0.99), for token tasks: false for NaN (no test set).
        if (early_stop > 0 && !is_lm && result.final_test_accuracy > early_stop && has_eval) stop = true;
        if (dist) stop = dist->all_reduce_sum({stop ? 1.0 : 0.0}, step - 1, "evaluation's verdict")[0] > 0;  // rank 0's
      }
      if (pause && !stop) {
        finish_stopped(step, "stopped by --stop-after");
        return result;
      }
      if (!quiet && (step % log_every == 0 || step == steps || stop)) {
        const double run_s = now - t_start;
        TrainProgress line;
        line.run_id = state.run_id;
        line.step = step;
        line.steps = steps;
        line.loss = sr.loss;
        line.show_ppl = is_lm;
        line.held_name = eval_split + " " + primary;
        line.held = last_primary;
        line.lr = cur_lr;
        line.tokens_per_s = last_tps;
        line.eta_s = (steps - step) * run_s / std::max<int64_t>(1, step - first_step);
        std::printf("%s\n", format_train_progress(line).c_str());
        std::fflush(stdout);
      }
      if (stop) {
        if (!quiet) std::printf("[run %lld] early stop: test accuracy %.4f > %.4f\n",
                                    (long long)state.run_id, result.final_test_accuracy, early_stop);
        break;
      }
    }
    if (saved_step != step) checkpoint_now(step);  // a resume of a run stopped at its last step
    fill_result(step);
    if (dist) {
      const double steps_run = double(std::max<int64_t>(1, step - first_step));
      result.allreduce_s_per_step = dist->all_reduce_seconds() / steps_run;
      result.buckets_in_backward_per_step = double(dist->buckets_launched_in_backward()) / steps_run;
    }
    if (!main_rank) return result;
    // ---- summary rows ----
    std::vector<MetricRow> summary = {{state.run_id, step, "summary", "wall_s", result.wall_s, result.wall_s},
                                      {state.run_id, step, "summary", "tokens_per_s", result.tokens_per_s, result.wall_s}};
    auto add = [&](const std::string& name, double v) {
      summary.push_back({state.run_id, step, "summary", name, v, result.wall_s});
    };
    if (has_eval && result.final_eval.contains("accuracy")) add("best_test_accuracy", result.best_test_accuracy);
    if (train_seconds > 0) add("data_wait_share", data_seconds / train_seconds);  // this invocation
    if (dist) {
      add("world_size", world);
      add("allreduce_s_per_step", result.allreduce_s_per_step);  // this invocation: not hidden by the backward
      add("buckets_in_backward_per_step", result.buckets_in_backward_per_step);
    }
    if (is_lm) {
      add("train_tokens", double(tokens_seen()));
      add("flops", training_flops(mc, model.num_parameters(), tokens_seen(), context));
      add("best_val_" + primary, state.best_primary);
      for (const char* m : {"ppl", "bpb", "loss"})
        if (result.final_eval.contains(m)) add(std::string("final_val_") + m, result.final_eval[m].get<double>());
    } else if (has_eval && primary != "accuracy") {
      add("best_" + eval_split + "_" + primary, state.best_primary);
    }
    db.add_metrics(summary);
    db.set_run_status(state.run_id, "completed");
  } catch (const std::exception& e) {
    try {
      if (main_rank) db.set_run_status(state.run_id, "failed", error_line(e));
    } catch (const std::exception&) {
    }
    throw;
  }
  return result;
}

}  // namespace mnemo
