// `mnemo bench`: throughput, latency and memory of a model on random tokens (docs/tasks.md#efficiency-benchmarks).
//  fwd    : forward under NoGradGuard, batch B x T tokens.
//  fwdbwd : forward + cross-entropy backward + AdamW step (one training step).
//  decode : prefill a T-token prompt, then time `decode_tokens` greedy tokens one at a time
//           with the model's state; times are per generated token.
// Times: monotonic clock, after `warmup` untimed repetitions, median / p20 / p80 over `repeats`.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/tools/bench_measure.h"
#include "results/db.h"
#include "core/common.h"
#include "runtime/model.h"

namespace mnemo {

struct BenchOptions {
  std::string model;
  std::vector<int64_t> seq_lens = {512, 1024, 2048, 4096};
  std::vector<std::string> modes = {"fwd"};  // fwd | fwdbwd | decode
  int64_t batch = 1;
  int64_t d_model = 128, n_layers = 2, n_heads = 4;
  int64_t vocab_size = 256;
  std::string form;  // chunk | recurrent (recurrent families' "form" argument); empty = default
  // "model": the whole language model on random tokens; "mixer": only the first layer's token mixer on
  // random [B, T, d_model] activations (isolates the kernel from embedding, MLPs and norms). Mixer rows are
  // recorded with mode "mixer_<mode>" (fwdbwd there = forward + backward of mean(y^2), no optimiser step).
  std::string scope = "model";
  // Non-empty: benchmark this kernel op (`mnemo check-kernel`'s ops, runtime/ops/kernel_ops.h) alone on random
  // inputs [B, T, H = n_heads, D = head_dim] in each of its forms (or `form`); scope becomes "kernel", rows get
  // model = the op, mode "kernel_<mode>" (fwd; fwdbwd = backward of mean(o^2) to every input). --set chunk_size=N
  // sets the chunk of chunked forms (default 64).
  std::string kernel;
  int64_t head_dim = 0;  // kernel scope: 0 = d_model / n_heads
  int64_t warmup = 2, repeats = 5;
  int64_t decode_tokens = 32;
  json set = json::object();  // extra config keys (--set key=value)
  std::string device = "auto";  // cpu | cuda | cuda:N | auto
  std::string precision = "fp32";  // fp32 | bf16 (autocast; runtime/mixed_precision.h), model and mixer scopes
  uint64_t seed = 0;
  // Model scope on CUDA, fwd and fwdbwd: capture the step once as a CUDA graph after the warm-up and time its
  // replays; rows get mode "fwd_graph" / "fwdbwd_graph".
  bool cuda_graph = false;
  // Model scope, fwd and fwdbwd: > 0 cuts each row into documents of 1 to 2·doc_len − 1 tokens (mean doc_len, drawn
  // from the seed) and runs them as packed sequences, each from the initial state, as reset_state_at_bos trains
  // (LanguageModel::forward_packed, docs/models.md#packed-sequences); rows get mode "fwd_packed" / "fwdbwd_packed".
  int64_t doc_len = 0;
  // Called with true just before the first timed repetition of each measurement and with false after its last
  // (bench --profile profiles only these); empty = nothing.
  std::function<void(bool begin)> on_timed;
};

// Check the options; throws Error naming the bad option and value.
void validate(const BenchOptions& opt);

// The flat model config: skeleton defaults, the model's mixer defaults and family overrides,
// then d_model/n_layers/n_heads/vocab_size, --set keys and "form". An unknown key (or a --form
// for a model none of whose mixers has a "form" argument) is an Error listing the valid keys.
json bench_model_config(const BenchOptions& opt);


// FLOP estimate of one measured unit (a fwd / fwdbwd step on B x T tokens, or one decode token averaged over the
// generated tokens after a T-token prompt): B x tokens x forward_flops_per_token (engine/training/flops.h, the formula the
// training runs' FLOP count uses; decode: positions T .. T + decode_tokens from the carried state), fwdbwd = 3 x.
double bench_flops(const ModelConfig& cfg, int64_t n_params, const std::string& mode, int64_t batch,
                   int64_t seq_len, int64_t decode_tokens);
std::string bench_flop_formula();

// The measurement settings of `opt` that the instruments (engine/tools/bench_measure.h) apply.
MeasureSpec measure_spec(const BenchOptions& opt);

// The measurement conditions printed before the table (threads, BLAS, dtype, warm-up, repeats,
// device, FLOP formula, memory method).
std::string bench_method_text(const BenchOptions& opt, const torch::Device& device);

// Run every (mode, seq_len); `on_row` sees each row as soon as it is measured.
std::vector<BenchRow> run_benchmarks(const BenchOptions& opt,
                                     const std::function<void(const BenchRow&)>& on_row = {});

}  // namespace mnemo
