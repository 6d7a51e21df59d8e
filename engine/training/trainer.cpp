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
#include "engine/training/optimiser_step.h"
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
  return make_corpus_source(*d.lm.train, w, device);
}

std::unique_ptr<Objective> make_objective(const RunData& d, const json& cfg, const torch::Device& device) {
  if (d.token_task)
    return make_token_objective(*d.token_task, cfg.at("n_test"), cfg.at("seed").get<uint64_t>(),
                                cfg.at("eval_batch_size"), device);
  return make_lm_objective(d.lm, d.lm_task->seq_len(), cfg.at("val_tokens"), cfg.at("eval_batch_size"), device);
}

// ---- joining a data-parallel job ----

// Every rank runs train() with the same config; rank 0 alone writes. Null for a single process.
std::unique_ptr<Distributed> join_job(const json& cfg, const std::string& hash, const TrainOptions& opt,
                                      torch::Device& device, TrainResult& result) {
  if (!opt.dist.distributed()) return nullptr;
  const int world = opt.dist.world_size;
  const int64_t batch = cfg.at("batch_size");
  if (batch % world != 0)
    throw Error("batch_size " + std::to_string(batch) + " is not a multiple of the " + std::to_string(world) +
                " ranks (batch_size is the whole micro-batch; each rank trains on batch_size / world_size rows)");
  if (device.is_cuda()) device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(opt.dist.local_rank));
  auto dist = std::make_unique<Distributed>(opt.dist, device, opt.dist_timeout);
  dist->check_same_config(hash);
  result.dist_backend = dist->backend();
  return dist;
}

// ---- the parts, built and checked before the run row is created (or a resumed one set running) ----

struct RunParts {
  RunData data;
  ModelConfig model_config;
  Backbone model;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<DataSource> source;
  std::unique_ptr<Objective> objective;
  std::string primary, eval_split;  // the held-out metric best_* and the progress line follow, and its split
  bool has_eval = false, maximise = false, is_lm = false;
  int64_t context = 0;  // language modelling: the training context (the FLOP count's)
};

RunParts build_parts(const json& cfg, const TrainOptions& opt, const RunRecord& rec, const std::string& out_dir,
                     const torch::Device& device, Distributed* dist, bool main_rank, bool quiet) {
  RunParts p;
  if (main_rank) check_out_dir_writable(out_dir);
  if (dist && !main_rank) dist->barrier("data preparation");  // rank 0 builds the corpus's token shards first
  p.data = open_run_data(cfg, quiet);  // builds or reuses a corpus's token shards
  if (dist && main_rank) dist->barrier("data preparation");
  const uint64_t seed = cfg.at("seed").get<uint64_t>();
  if (p.data.token_task) check_example_memory(*p.data.token_task, cfg.at("n_train"), cfg.at("n_test"), seed);

  torch::manual_seed(seed);
  p.model_config = model_config_from_json(cfg);
  p.model_config.vocab_size = p.data.vocab_size;
  p.model = make_backbone(p.data.backbone, p.model_config);
  p.model.module->to(device);
  p.optimizer = make_adamw(*p.model.module, cfg);
  if (rec.resuming) {
    check_checkpoint_model(out_dir, p.model);
    load_weights(out_dir, p.model);
    p.model.module->to(device);
    load_optimizer(out_dir, *p.optimizer);
  }
  if (dist) {
    dist->broadcast_module(*p.model.module);  // identical starting weights (rank 0's)
    dist->attach_gradients(p.model.module->parameters(), opt.dist_bucket_bytes, opt.dist_overlap);
  }
  p.source = make_rank_share(make_source(p.data, cfg, device), opt.dist.rank, opt.dist.world_size);
  p.objective = make_objective(p.data, cfg, device);
  p.has_eval = p.objective->has_eval();
  p.eval_split = p.objective->eval_split();
  p.primary = cfg.at("primary_metric");
  if (p.primary.empty()) p.primary = p.objective->default_primary();
  p.maximise = higher_is_better(p.primary);
  p.is_lm = p.data.lm_task != nullptr;
  p.context = p.is_lm ? p.data.lm_task->seq_len() : 0;
  return p;
}

// Rank 0: the run row set 'running': the checkpoint's (its metrics after the checkpoint's step dropped), the adopted
// one (from step 0), or a new one with the config, the job's shape and the machine. Every rank learns its id.
void start_run_row(RunRecord& rec, ResultsDB& db, const json& cfg, const std::string& hash, const TrainOptions& opt,
                   const std::string& out_dir, const torch::Device& device, RunParts& parts, Distributed* dist,
                   bool main_rank) {
  TrainerState& state = rec.state;
  if (!main_rank) {
  } else if (rec.resuming) {
    if (state.db_path != opt.db_path && !state.db_path.empty())
      std::printf("note: checkpoint was logged to %s; continuing in %s\n", state.db_path.c_str(), opt.db_path.c_str());
    db.delete_metrics_after(state.run_id, state.step);
    db.set_run_status(state.run_id, "running");
  } else if (rec.adopted) {
    state.run_id = rec.adopted->id;
    state.db_path = opt.db_path;
    db.delete_metrics_after(state.run_id, -1);
    db.set_run_last_step(state.run_id, 0);
    db.set_run_status(state.run_id, "running");
  } else {
    const int world = opt.dist.world_size;
    RunInfo r;
    r.model = cfg.at("model");
    r.task = cfg.at("task");
    json recorded = cfg;
    if (dist) {  // the job's shape beside the config (not in its hash: the same run on any number of ranks)
      recorded["world_size"] = world;
      recorded["rank_batch_size"] = cfg.at("batch_size").get<int64_t>() / world;
      recorded["global_batch_size"] = cfg.at("batch_size").get<int64_t>() * cfg.at("grad_accum").get<int64_t>();
      recorded["dist_backend"] = dist->backend();
      recorded["dist_bucket_bytes"] = opt.dist_bucket_bytes;
      recorded["dist_overlap"] = opt.dist_overlap;
    }
    r.config_json = recorded.dump();
    r.config_hash = hash;
    r.seed = static_cast<int64_t>(cfg.at("seed").get<uint64_t>());
    r.device = device.str();
    r.git_commit = git_commit();
    r.host = hostname();
    r.out_dir = out_dir;
    r.sweep = opt.sweep;
    r.n_params = parts.model.num_parameters();
    state.run_id = db.create_run(r);
    state.db_path = opt.db_path;
  }
  if (dist)
    state.run_id = static_cast<int64_t>(dist->all_reduce_sum({main_rank ? double(state.run_id) : 0.0}, -1,
                                                             "run start")[0]);
}

// ---- the loop and what it writes: metrics log, checkpoints, progress line, summary rows ----

class TrainingLoop {
 public:
  TrainingLoop(const json& cfg, const TrainOptions& opt, const torch::Device& device, RunParts& parts,
               TrainerState& state, ResultsDB& db, Distributed* dist, bool main_rank, bool quiet, TrainResult& result)
      : cfg_(cfg), opt_(opt), device_(device), p_(parts), state_(state), db_(db), dist_(dist), main_rank_(main_rank),
        quiet_(quiet), result_(result), precision_(parse_precision(cfg.at("precision"))),
        steps_(cfg.at("steps")), accum_(cfg.at("grad_accum")), eval_every_(cfg.at("eval_every")),
        log_every_(std::max<int64_t>(1, cfg.at("log_every").get<int64_t>())), lr_(cfg.at("lr")),
        min_ratio_(cfg.at("min_lr_ratio")), clip_(cfg.at("grad_clip")), early_stop_(cfg.at("early_stop_acc")),
        t_start_(wall_seconds()), prior_wall_(state.wall_s), prior_train_(state.train_s),
        prior_tokens_(state.train_tokens), first_step_(state.step), window_start_(t_start_) {
    const int64_t warmup_steps = cfg.at("warmup_steps");
    warmup_ = warmup_steps >= 0 ? warmup_steps : static_cast<int64_t>(std::llround(cfg.at("warmup_frac").get<double>() * steps_));
    if (!p_.has_eval) result_.best_test_accuracy = result_.final_test_accuracy = result_.final_test_loss = NAN;
    if (p_.is_lm) result_.best_test_accuracy = result_.final_test_accuracy = NAN;  // no accuracy in language modelling
  }

  // Trains from state.step to `steps` (or a stop); the caller marks the row failed if this throws.
  void run(bool resuming) {
    saved_step_ = resuming ? state_.step : -1;
    int64_t step = state_.step;
    bool job_stop = false;  // data-parallel: a rank was signalled (the step's control message says so to all)
    p_.model.module->train();
    const auto graphed = make_graphed_step(cfg_, p_.model, *p_.optimizer, *p_.source, step, clip_, device_, precision_, dist_);
    while (step < steps_) {
      if (dist_ ? job_stop : stop_requested()) {  // SIGINT / SIGTERM: between two steps
        finish_stopped(step, std::string("interrupted by ") +
                                 (stop_requested() ? stop_signal_name() : "a signal to another rank"));
        result_.stop_signal = stop_requested() ? stop_signal() : SIGTERM;
        return;
      }
      const double step_start = wall_seconds();
      const double lr = cosine_lr(step, steps_, warmup_, lr_, min_ratio_);
      set_lr(*p_.optimizer, lr);
      StepResult sr;
      try {
        sr = graphed ? graphed_step(*graphed, *p_.source, step, lr)
                     : optimiser_step(p_.model, *p_.optimizer, *p_.source, step, accum_, clip_, device_, precision_, dist_);
      } catch (const Error& e) {
        throw Error(std::string(e.what()) + " (run " + std::to_string(state_.run_id) + ")");
      }
      ++step;
      train_seconds_ += wall_seconds() - step_start;
      data_seconds_ += sr.data_s;
      tokens_total_ += sr.tokens;
      window_tokens_ += double(sr.tokens);
      last_loss_ = sr.loss;
      job_stop = sr.stop;

      const double now = wall_seconds();
      if (step % log_every_ == 0 || step == steps_) log_train_metrics(step, sr, lr, now);
      bool stop = false;
      const bool pause = opt_.stop_after > 0 && step - first_step_ >= opt_.stop_after && step < steps_;
      if ((eval_every_ > 0 && step % eval_every_ == 0) || step == steps_ || pause) {
        evaluate_and_checkpoint(step);
        // Early stop on accuracy (Zoology's 0.99), for token tasks: false for NaN (no test set).
        if (early_stop_ > 0 && !p_.is_lm && result_.final_test_accuracy > early_stop_ && p_.has_eval) stop = true;
        if (dist_) stop = dist_->all_reduce_sum({stop ? 1.0 : 0.0}, step - 1, "evaluation's verdict")[0] > 0;  // rank 0's
      }
      if (pause && !stop) {
        finish_stopped(step, "stopped by --stop-after");
        return;
      }
      if (!quiet_ && (step % log_every_ == 0 || step == steps_ || stop)) print_progress(step, sr.loss, lr, now);
      if (stop) {
        if (!quiet_)
          std::printf("[run %lld] early stop: test accuracy %.4f > %.4f\n", (long long)state_.run_id,
                      result_.final_test_accuracy, early_stop_);
        break;
      }
    }
    if (saved_step_ != step) checkpoint(step);  // a resume of a run stopped at its last step
    fill_result(step);
    if (dist_) {
      const double steps_run = double(std::max<int64_t>(1, step - first_step_));
      result_.allreduce_s_per_step = dist_->all_reduce_seconds() / steps_run;
      result_.buckets_in_backward_per_step = double(dist_->buckets_launched_in_backward()) / steps_run;
    }
    if (!main_rank_) return;
    write_summary(step);
    db_.set_run_status(state_.run_id, "completed");
  }

 private:
  double elapsed() const { return prior_wall_ + (wall_seconds() - t_start_); }  // every invocation of the run
  int64_t tokens_seen() const { return prior_tokens_ + tokens_total_; }

  // The train split's rows of this step: loss, the objective's own, lr, tokens/s over the window, ...
  void log_train_metrics(int64_t step, const StepResult& sr, double lr, double now) {
    last_tps_ = window_tokens_ / std::max(1e-9, now - window_start_);
    window_tokens_ = 0;
    window_start_ = now;
    const double at = elapsed();
    const int64_t id = state_.run_id;
    pending_.push_back({id, step, "train", "loss", sr.loss, at});
    for (const auto& [name, value] : p_.objective->train_metrics(sr.loss)) pending_.push_back({id, step, "train", name, value, at});
    pending_.push_back({id, step, "train", "lr", lr, at});
    pending_.push_back({id, step, "train", "tokens_per_s", last_tps_, at});
    if (p_.is_lm) pending_.push_back({id, step, "train", "tokens", double(tokens_seen()), at});
    if (clip_ > 0) pending_.push_back({id, step, "train", "grad_norm", sr.grad_norm, at});
    if (std::isfinite(sr.aux)) pending_.push_back({id, step, "train", "aux_loss", sr.aux, at});
  }

  // The progress line: step, loss, the held-out metric, lr, tokens/s, ETA.
  void print_progress(int64_t step, double loss, double lr, double now) const {
    const double run_s = now - t_start_;
    TrainProgress line;
    line.run_id = state_.run_id;
    line.step = step;
    line.steps = steps_;
    line.loss = loss;
    line.show_ppl = p_.is_lm;
    line.held_name = p_.eval_split + " " + p_.primary;
    line.held = last_primary_;
    line.lr = lr;
    line.tokens_per_s = last_tps_;
    line.eta_s = (steps_ - step) * run_s / std::max<int64_t>(1, step - first_step_);
    std::printf("%s\n", format_train_progress(line).c_str());
    std::fflush(stdout);
  }

  // The pending metric rows, then the checkpoint (trainer.json carries the totals so far).
  void checkpoint(int64_t step_done) {
    saved_step_ = step_done;
    if (!main_rank_) return pending_.clear();
    db_.add_metrics(pending_);
    pending_.clear();
    state_.step = step_done;
    state_.wall_s = elapsed();
    state_.train_s = prior_train_ + train_seconds_;
    state_.train_tokens = tokens_seen();
    state_.data_position = p_.source->position(step_done);
    save_checkpoint(result_.out_dir, cfg_, p_.model, p_.optimizer.get(), state_);
    db_.set_run_last_step(state_.run_id, step_done);
    saved_step_ = step_done;
  }

  // Held-out metrics (and best_<primary>) on rank 0, then the checkpoint.
  void evaluate_and_checkpoint(int64_t step_done) {
    if (p_.has_eval && main_rank_) {
      const Metrics m = [&] {
        const AutocastScope autocast(device_, precision_);  // evaluation in the run's precision, as nanoGPT's
        return p_.objective->evaluate(p_.model);
      }();
      const double now = elapsed();
      for (const auto& [name, value] : m) {
        pending_.push_back({state_.run_id, step_done, p_.eval_split, name, value, now});
        result_.final_eval[name] = value;
        if (name == p_.primary) last_primary_ = value;
      }
      if (p_.is_lm) pending_.push_back({state_.run_id, step_done, p_.eval_split, "tokens", double(tokens_seen()), now});
      if (!result_.final_eval.contains(p_.primary))
        throw Error("primary_metric '" + p_.primary + "' is not a metric of task '" + cfg_.at("task").get<std::string>() +
                    "'; it logs: " + result_.final_eval.dump());
      if (!std::isfinite(state_.best_primary) ||
          (p_.maximise ? last_primary_ > state_.best_primary : last_primary_ < state_.best_primary))
        state_.best_primary = last_primary_;
      if (result_.final_eval.contains("accuracy")) {
        result_.final_test_accuracy = result_.final_eval["accuracy"];
        state_.best_test_accuracy = std::max(state_.best_test_accuracy, result_.final_test_accuracy);
      }
      if (result_.final_eval.contains("loss")) result_.final_test_loss = result_.final_eval["loss"];
    }
    checkpoint(step_done);
  }

  void fill_result(int64_t step_done) {
    result_.steps = step_done;
    if (p_.has_eval) {
      if (result_.final_eval.contains("accuracy")) result_.best_test_accuracy = state_.best_test_accuracy;
      result_.best_primary = state_.best_primary;
      result_.final_primary = last_primary_;
    }
    result_.final_train_loss = last_loss_;
    result_.wall_s = elapsed();
    result_.tokens_per_s = double(tokens_seen()) / std::max(1e-9, prior_train_ + train_seconds_);
  }

  // Checkpointed, status 'stopped' (resumable).
  void finish_stopped(int64_t step_done, const std::string& why) {
    if (saved_step_ != step_done) checkpoint(step_done);
    if (main_rank_)
      db_.set_run_status(state_.run_id, "stopped", why + " at step " + std::to_string(step_done) + "; --resume continues");
    if (!quiet_)
      std::printf("[run %lld] stopped at step %lld (%s; checkpoint in %s)\n", (long long)state_.run_id,
                  (long long)step_done, why.c_str(), result_.out_dir.c_str());
    result_.stopped = true;
    fill_result(step_done);
  }

  // The summary rows of a finished run (rank 0).
  void write_summary(int64_t step) {
    std::vector<MetricRow> summary = {{state_.run_id, step, "summary", "wall_s", result_.wall_s, result_.wall_s},
                                      {state_.run_id, step, "summary", "tokens_per_s", result_.tokens_per_s, result_.wall_s}};
    auto add = [&](const std::string& name, double v) {
      summary.push_back({state_.run_id, step, "summary", name, v, result_.wall_s});
    };
    if (p_.has_eval && result_.final_eval.contains("accuracy")) add("best_test_accuracy", result_.best_test_accuracy);
    if (train_seconds_ > 0) add("data_wait_share", data_seconds_ / train_seconds_);  // this invocation
    if (dist_) {
      add("world_size", opt_.dist.world_size);
      add("allreduce_s_per_step", result_.allreduce_s_per_step);  // this invocation: not hidden by the backward
      add("buckets_in_backward_per_step", result_.buckets_in_backward_per_step);
    }
    if (p_.is_lm) {
      add("train_tokens", double(tokens_seen()));
      add("flops", training_flops(p_.model_config, p_.model.num_parameters(), tokens_seen(), p_.context));
      add("best_val_" + p_.primary, state_.best_primary);
      for (const char* m : {"ppl", "bpb", "loss"})
        if (result_.final_eval.contains(m)) add(std::string("final_val_") + m, result_.final_eval[m].get<double>());
    } else if (p_.has_eval && p_.primary != "accuracy") {
      add("best_" + p_.eval_split + "_" + p_.primary, state_.best_primary);
    }
    db_.add_metrics(summary);
  }

  const json& cfg_;
  const TrainOptions& opt_;
  const torch::Device& device_;
  RunParts& p_;
  TrainerState& state_;
  ResultsDB& db_;
  Distributed* dist_;
  const bool main_rank_, quiet_;
  TrainResult& result_;
  const Precision precision_;
  const int64_t steps_, accum_, eval_every_, log_every_;
  const double lr_, min_ratio_, clip_, early_stop_;
  int64_t warmup_ = 0;
  // Times and tokens add up over invocations: the checkpoint carries the totals so far.
  const double t_start_, prior_wall_, prior_train_;
  const int64_t prior_tokens_, first_step_;
  std::vector<MetricRow> pending_;  // metric rows written at the next checkpoint
  double window_tokens_ = 0, window_start_, last_tps_ = 0, last_loss_ = NAN, last_primary_ = NAN;
  int64_t tokens_total_ = 0;   // this invocation
  double train_seconds_ = 0;   // optimiser steps only (no evaluation, checkpoints or logging)
  double data_seconds_ = 0;    // of which drawing batches
  int64_t saved_step_ = -1;    // step of the checkpoint on disk
};

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
  const DefaultDtypeScope dtype_scope(parse_precision(cfg.at("precision")));  // fp64: built and trained in float64

  // Data-parallel: join the job (every rank runs this function with the same config); rank 0 alone writes.
  std::unique_ptr<Distributed> dist = join_job(cfg, hash, opt, device, result);
  const bool main_rank = !dist || dist->is_main();
  const bool quiet = opt.quiet || !main_rank;
  result.world_size = opt.dist.world_size;
  result.rank = opt.dist.rank;

  // The run record: resume from the checkpoint, adopt an unfinished row, or start anew.
  RunRecord rec;
  read_checkpoint(rec, hash, opt.resume, result.out_dir, dist.get(), main_rank, quiet);
  ResultsDB db(main_rank ? opt.db_path : std::string(":memory:"));  // other ranks: nothing is written
  rehash_runs_if_old(db);
  if (main_rank) find_run_row(rec, db, hash, opt.resume, opt.db_path, result.out_dir);
  if (dist) agree_on_resume(rec, *dist, opt.dist, result.out_dir);
  if (rec.completed_already) {
    if (rec.completed_run) return completed_result(db, *rec.completed_run, result.out_dir, quiet);
    result.already_completed = true;
    result.run_id = rec.state.run_id;
    result.steps = rec.state.step;
    return result;
  }

  // The parts: data, model, optimiser, data source, objective (checked before any row is written).
  RunParts parts = build_parts(cfg, opt, rec, result.out_dir, device, dist.get(), main_rank, quiet);
  rec.state.primary_metric = parts.primary;
  if (!dist && stop_requested()) {  // a signal before anything was recorded: nothing to undo
    result.stopped = true;
    result.stop_signal = stop_signal();
    result.run_id = rec.resuming ? rec.state.run_id : 0;
    result.steps = rec.state.step;
    return result;
  }
  start_run_row(rec, db, cfg, hash, opt, result.out_dir, device, parts, dist.get(), main_rank);
  result.run_id = rec.state.run_id;
  result.primary_metric = parts.primary;

  // From here on the row says 'running': any error marks it failed with a one-line reason.
  try {
    if (main_rank) db.set_run_process(rec.state.run_id, static_cast<int64_t>(::getpid()), hostname());
    TrainingLoop(cfg, opt, device, parts, rec.state, db, dist.get(), main_rank, quiet, result).run(rec.resuming);
  } catch (const std::exception& e) {
    try {
      if (main_rank) db.set_run_status(rec.state.run_id, "failed", error_line(e));
    } catch (const std::exception&) {
    }
    throw;
  }
  return result;
}

}  // namespace mnemo
