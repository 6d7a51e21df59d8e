// The instruments of `mnemo bench`: one measurement (warm-up, then timed repeats on the same inputs, and the peak
// memory over them) of a whole language model, of one mixer, or of one kernel op; the statistics of the times.
// The protocol each applies is in engine/tools/bench.h; engine/tools/bench.cpp chooses what to measure.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/mixer.h"
#include "runtime/model.h"
#include "runtime/ops/kernel_ops.h"

namespace mnemo {

// How one measurement runs: the batch, the vocabulary of the random tokens, warm-up and timed repeats, the decoded
// tokens, the precision (fp32 | bf16 autocast) and a hook called around the timed repeats (bench --profile).
struct MeasureSpec {
  int64_t batch = 1, vocab_size = 256, warmup = 2, repeats = 5, decode_tokens = 32;
  std::string precision = "fp32";
  std::function<void(bool begin)> on_timed;
  // Model scope, fwd and fwdbwd on CUDA: the step captured once as a CUDA graph (engine/training/cuda_graph.h)
  // after the warm-up, each repetition one replay.
  bool cuda_graph = false;
  int64_t doc_len = 0;  // > 0: packed documents of this mean length (BenchOptions::doc_len)
  uint64_t seed = 0;    // of the document lengths
};

// Peak memory of a measurement: CPU = growth of VmHWM over the starting VmRSS (VmHWM is reset
// through /proc/self/clear_refs where allowed), CUDA = max_memory_allocated growth.
class PeakMemoryProbe {
 public:
  explicit PeakMemoryProbe(const torch::Device& device);
  void start();
  double peak_mb() const;  // since start(); NaN if it cannot be measured
  std::string method() const;

 private:
  torch::Device device_;
  double baseline_mb_ = 0;
  bool hwm_reset_ = false;
};

// median, p20, p80 (linear interpolation between order statistics).
struct TimeStats {
  double median = 0, p20 = 0, p80 = 0;
};
TimeStats time_stats(std::vector<double> samples);

// What one measurement saw: the time of each timed repeat (decode: per generated token), the prefill times (decode),
// the bytes of the decode state, the peak memory.
struct Measured {
  std::vector<double> times_s;
  std::vector<double> prefill_s;
  int64_t state_bytes = -1;
  double peak_mb = NAN;
};

// A whole model on random tokens: fwd, fwdbwd (cross-entropy + AdamW step, the AdamW of training: make_adamw)
// or decode (prefill T, then
// decode_tokens greedy tokens with the carried state).
Measured measure_model(LanguageModel& model, const MeasureSpec& opt, const std::string& mode, int64_t T,
                       const torch::Device& device);
// The first layer's mixer alone on random [B, T, d_model] activations (scope "mixer").
Measured measure_mixer(Mixer& mixer, const MeasureSpec& opt, const std::string& mode, int64_t T, int64_t d_model,
                       const torch::Device& device);
// One kernel op alone (scope "kernel"): random inputs from the op, every timed repeat on the same inputs.
Measured measure_kernel(const KernelOp& op, const KernelBenchInputs& in, const std::string& form, int64_t chunk,
                        const std::string& mode, const MeasureSpec& spec, const torch::Device& device);

}  // namespace mnemo
