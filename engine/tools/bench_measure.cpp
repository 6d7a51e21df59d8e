// The instruments of `mnemo bench` (docs/tasks.md#efficiency-benchmarks): one measurement of a whole model, of one
// mixer or of one kernel op (warm-up, timed repeats, peak memory), and the statistics of its times. The driver that
// chooses what to measure and records the rows is engine/tools/bench.cpp.
#include "engine/tools/bench_measure.h"

#include <algorithm>
#include <random>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "engine/training/static_decode.h"
#include "engine/tools/op_profile.h"
#include "engine/training/cuda_graph.h"
#include "engine/training/optim.h"
#include "runtime/cuda_device.h"
#include "runtime/device.h"
#include "runtime/mixed_precision.h"

namespace mnemo {

namespace bench_clock {  // named (not anonymous): unity builds join this file with others

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// VmRSS / VmHWM of this process in MB; NaN where /proc is unavailable.
double proc_status_mb(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream in(line.substr(field.size() + 1));
      double kb = 0;
      in >> kb;
      return kb / 1024.0;
    }
  return NAN;
}

}  // namespace bench_clock

using bench_clock::now_s;
using bench_clock::proc_status_mb;

Measured measure_model(LanguageModel& model, const MeasureSpec& opt, const std::string& mode, int64_t T,
                 const torch::Device& device) {
  Measured m;
  auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  torch::Tensor tokens = torch::randint(0, opt.vocab_size, {opt.batch, T}, long_opts);
  PeakMemoryProbe probe(device);
  std::unique_ptr<torch::optim::AdamW> adamw;
  if (mode == "fwdbwd") {
    model->train();
    // Training's AdamW (one multi-tensor kernel per parameter group where LibTorch has one), as fla's fused=True.
    adamw = make_adamw(*model, json{{"lr", 1e-4}, {"beta1", 0.9}, {"beta2", 0.95}, {"adam_eps", 1e-8},
                                    {"weight_decay", 0.1}});
  } else {
    model->eval();
  }
  torch::Tensor targets = torch::randint(0, opt.vocab_size, {opt.batch, T}, long_opts);
  // --doc-len: documents of 1 .. 2·doc_len − 1 tokens back to back in every row (a row's start begins one too).
  torch::Tensor starts;
  if (opt.doc_len > 0) {
    starts = torch::zeros({opt.batch, T}, torch::kBool);
    auto* s = starts.data_ptr<bool>();
    std::mt19937_64 rng(opt.seed);
    std::uniform_int_distribution<int64_t> len(1, 2 * opt.doc_len - 1);
    for (int64_t b = 0; b < opt.batch; ++b)
      for (int64_t t = len(rng); t < T; t += len(rng)) s[b * T + t] = true;
  }
  auto forward = [&]() { return starts.defined() ? model->forward_packed(tokens, starts) : model->forward(tokens); };

  const Precision precision = parse_precision(opt.precision);
  const bool graphed = opt.cuda_graph && mode != "decode";
  // One step of fwd or fwdbwd. A graphed step keeps its gradient tensors (zeroed, not freed): a replay writes the
  // same tensors the capture did.
  auto one_step = [&] {
    if (mode == "fwd") {
      torch::NoGradGuard no_grad;
      const AutocastScope autocast(device, precision);
      forward();
      return;
    }
    if (graphed)
      model->zero_grad(/*set_to_none=*/false);
    else
      adamw->zero_grad();
    torch::Tensor loss, aux;
    {
      const AutocastScope autocast(device, precision);
      torch::Tensor logits = forward();
      loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat),
                                                  targets.reshape({-1}));
      aux = model->aux_loss();
    }
    (aux.defined() ? loss + aux : loss).backward();
    adamw->step();
  };
  DeviceTimer timer(device);
  TimedSection section(opt.on_timed, device);
  probe.start();
  std::unique_ptr<CapturedStep> graph;
  if (graphed) graph = std::make_unique<CapturedStep>(one_step, device, static_cast<int>(std::max<int64_t>(opt.warmup, 1)));
  for (int64_t i = 0; i < opt.warmup + opt.repeats; ++i) {
    bool timed = i >= opt.warmup;
    section.before(i, opt.warmup);
    if (mode == "fwd" || mode == "fwdbwd") {
      synchronize(device);
      timer.start();
      if (graph)
        graph->replay();
      else
        one_step();
      const double elapsed = timer.stop_seconds();
      if (timed) m.times_s.push_back(elapsed);
    } else {  // decode: host clock after synchronize (a token's latency includes the launches)
      torch::NoGradGuard no_grad;
      const AutocastScope autocast(device, precision);
      ModelState state = model->initial_state();
      synchronize(device);
      double t0 = now_s();
      torch::Tensor logits = model->forward(tokens, &state);
      torch::Tensor next = logits.select(1, logits.size(1) - 1).argmax(-1, true);
      synchronize(device);
      double t1 = now_s();
      if (m.state_bytes < 0) {
        m.state_bytes = 0;
        for (const LayerState& s : state) m.state_bytes += s.bytes();
      }
      double decode_start = t1;
      if (opt.cuda_graph) {
        // The decode step captured once (after the prompt) and replayed per token; the capture is not timed.
        StaticDecodeStep decoder(*model, state, next, device, precision, /*capture=*/true);
        synchronize(device);
        decode_start = now_s();
        for (int64_t k = 0; k < opt.decode_tokens; ++k) decoder.step();
      } else {
        for (int64_t k = 0; k < opt.decode_tokens; ++k) {
          logits = model->forward(next, &state);
          next = logits.select(1, logits.size(1) - 1).argmax(-1, true);
        }
      }
      synchronize(device);
      double t2 = now_s();
      if (timed) {
        m.prefill_s.push_back(t1 - t0);
        m.times_s.push_back((t2 - decode_start) / static_cast<double>(opt.decode_tokens));
      }
    }
  }
  section.end();
  m.peak_mb = probe.peak_mb();
  if (adamw) model->zero_grad(true);  // free the gradients before the next measurement
  return m;
}

// The first layer's mixer alone on random activations (scope "mixer").
Measured measure_mixer(Mixer& mixer, const MeasureSpec& opt, const std::string& mode, int64_t T, int64_t d_model,
                       const torch::Device& device) {
  Measured m;
  auto x = torch::randn({opt.batch, T, d_model}, torch::TensorOptions().device(device));
  PeakMemoryProbe probe(device);
  mixer.train(mode == "fwdbwd");
  const Precision precision = parse_precision(opt.precision);
  DeviceTimer timer(device);
  TimedSection section(opt.on_timed, device);
  probe.start();
  for (int64_t i = 0; i < opt.warmup + opt.repeats; ++i) {
    bool timed = i >= opt.warmup;
    section.before(i, opt.warmup);
    synchronize(device);
    double t0 = now_s();
    timer.start();
    if (mode == "fwd") {
      torch::NoGradGuard no_grad;
      const AutocastScope autocast(device, precision);
      mixer.forward(x, nullptr);
    } else if (mode == "fwdbwd") {
      mixer.zero_grad();
      auto xg = x.detach().requires_grad_(true);
      torch::Tensor loss;
      {
        const AutocastScope autocast(device, precision);
        loss = mixer.forward(xg, nullptr).to(torch::kFloat32).pow(2).mean();
      }
      loss.backward();
    } else {  // decode: prefill T activations, then decode_tokens single steps
      torch::NoGradGuard no_grad;
      const AutocastScope autocast(device, precision);
      LayerState state;
      mixer.forward(x, &state);
      state.pos += T;
      synchronize(device);
      double t1 = now_s();
      if (m.state_bytes < 0) m.state_bytes = state.bytes();
      auto step = x.narrow(1, T - 1, 1);
      for (int64_t k = 0; k < opt.decode_tokens; ++k) {
        step = mixer.forward(step, &state);
        state.pos += 1;
      }
      synchronize(device);
      if (timed) {
        m.prefill_s.push_back(t1 - t0);
        m.times_s.push_back((now_s() - t1) / static_cast<double>(opt.decode_tokens));
      }
      continue;
    }
    const double elapsed = timer.stop_seconds();
    if (timed) m.times_s.push_back(elapsed);
  }
  section.end();
  m.peak_mb = probe.peak_mb();
  mixer.zero_grad();
  return m;
}

// One kernel op alone (scope "kernel"): random inputs from the op, every timed repeat on the same inputs.
Measured measure_kernel(const KernelOp& op, const KernelBenchInputs& in, const std::string& form, int64_t chunk,
                        const std::string& mode, const MeasureSpec& spec, const torch::Device& device) {
  const int64_t warmup = spec.warmup, repeats = spec.repeats;
  Measured m;
  TensorMap inputs;
  for (const auto& [name, t] : in.inputs) inputs[name] = t.to(device);
  PeakMemoryProbe probe(device);
  DeviceTimer timer(device);
  TimedSection section(spec.on_timed, device);
  probe.start();
  for (int64_t i = 0; i < warmup + repeats; ++i) {
    section.before(i, warmup);
    synchronize(device);
    timer.start();
    if (mode == "fwd") {
      torch::NoGradGuard no_grad;
      op.run(inputs, in.params, form, chunk);
    } else {
      TensorMap leaves;
      for (const auto& [name, t] : inputs) leaves[name] = t.detach().requires_grad_(t.is_floating_point());
      torch::Tensor loss;
      for (const auto& [name, out] : op.run(leaves, in.params, form, chunk)) {
        if (!out.requires_grad()) continue;
        auto term = out.pow(2).mean();
        loss = loss.defined() ? loss + term : term;
      }
      if (loss.defined()) loss.backward();
    }
    const double elapsed = timer.stop_seconds();
    if (i >= warmup) m.times_s.push_back(elapsed);
  }
  section.end();
  m.peak_mb = probe.peak_mb();
  return m;
}

PeakMemoryProbe::PeakMemoryProbe(const torch::Device& device) : device_(device) {}

void PeakMemoryProbe::start() {
  if (device_.is_cuda()) {
    synchronize(device_);
    cuda_reset_peak_memory(device_);
    baseline_mb_ = cuda_allocated_mb(device_, false);
    return;
  }
#if defined(__GLIBC__)
  malloc_trim(0);  // return freed heap pages so the baseline RSS is the live set
#endif
  std::ofstream clear("/proc/self/clear_refs");
  if (clear) {
    clear << "5";  // resets VmHWM to the current RSS
    clear.flush();
    hwm_reset_ = static_cast<bool>(clear);
  }
  baseline_mb_ = proc_status_mb("VmRSS");
}

double PeakMemoryProbe::peak_mb() const {
  if (device_.is_cuda()) {
    synchronize(device_);
    return std::max(0.0, cuda_allocated_mb(device_, true) - baseline_mb_);
  }
  if (!hwm_reset_) return NAN;  // VmHWM would include peaks from before the measurement
  return std::max(0.0, proc_status_mb("VmHWM") - baseline_mb_);
}

std::string PeakMemoryProbe::method() const {
  if (device_.is_cuda())
    return "CUDA caching allocator: peak allocated bytes minus allocated bytes at the start";
  return "process peak resident set (VmHWM, reset via /proc/self/clear_refs) minus VmRSS at the "
         "start of warm-up";
}

TimeStats time_stats(std::vector<double> samples) {
  if (samples.empty()) return {NAN, NAN, NAN};
  std::sort(samples.begin(), samples.end());
  auto q = [&](double p) {
    double pos = p * static_cast<double>(samples.size() - 1);
    size_t lo = static_cast<size_t>(std::floor(pos));
    size_t hi = std::min(samples.size() - 1, lo + 1);
    return samples[lo] + (pos - static_cast<double>(lo)) * (samples[hi] - samples[lo]);
  };
  return {q(0.5), q(0.2), q(0.8)};
}

}  // namespace mnemo
