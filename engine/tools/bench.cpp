// `mnemo bench`, the driver (docs/tasks.md#efficiency-benchmarks; the protocol: bench.h): checks the options, builds
// the model, mixer or kernel inputs, has each (mode, T) measured by the instruments of bench_measure.h and records
// the rows with the conditions they were measured under.
#include "engine/tools/bench.h"
#include "engine/training/cuda_graph.h"
#include "engine/training/flops.h"
#include "engine/tools/op_profile.h"

#include "runtime/device.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>


#include "engine/config/run_config.h"
#include "runtime/cuda_device.h"
#include "runtime/mixed_precision.h"
#include "runtime/ops/kernel_ops.h"
#include "runtime/registry.h"
#include "core/system_info.h"


namespace mnemo {

namespace {

const std::set<std::string> kModes = {"fwd", "fwdbwd", "decode"};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The measurement conditions shared by every row of one benchmark run (taken once per run).
struct Conditions {
  std::string host = hostname(), blas = blas_library(), torch_v = torch_version();
  std::string cpu_allocator = allocator_description(), denormals = denormals_description();
  int64_t threads = at::get_num_threads();
};

// A row with the conditions, the code's commit and the timings filled in; the caller adds what it measured.
BenchRow timed_row(const Conditions& c, const torch::Device& device, const TimeStats& st, int64_t repeats) {
  BenchRow r;
  r.created_at = now_iso8601();
  r.device = device.str();
  r.dtype = "float32";
  r.git_commit = git_commit();
  r.host = c.host;
  r.torch_version = c.torch_v;
  r.blas = c.blas;
  r.threads = c.threads;
  r.repeats = repeats;
  r.median_ms = st.median * 1e3;
  r.p20_ms = st.p20 * 1e3;
  r.p80_ms = st.p80 * 1e3;
  return r;
}

int64_t kernel_head_dim(const BenchOptions& opt) {
  return opt.head_dim > 0 ? opt.head_dim : opt.d_model / std::max<int64_t>(1, opt.n_heads);
}

int64_t kernel_chunk_size(const BenchOptions& opt) {
  if (!opt.set.contains("chunk_size")) return 64;
  const json& c = opt.set["chunk_size"];
  if (!c.is_number_integer() || c.get<int64_t>() <= 0)
    throw Error("bench --kernel: --set chunk_size must be a positive integer, got " + json_excerpt(c));
  return c.get<int64_t>();
}

std::vector<std::string> kernel_forms(const KernelOp& op, const std::string& form) {
  if (form.empty()) return op.forms;
  if (std::find(op.forms.begin(), op.forms.end(), form) == op.forms.end())
    throw Error("bench: --form '" + form + "' is not a form of kernel op '" + op.name + "' (forms: " +
                join(op.forms) + ")");
  return {form};
}

void validate_kernel(const BenchOptions& opt) {
  const KernelOp& op = KernelOpRegistry::instance().at(opt.kernel);  // unknown op: Error listing the ops
  if (!op.random_inputs) throw Error("bench: kernel op '" + opt.kernel + "' has no random inputs to benchmark");
  if (!opt.model.empty()) throw Error("bench: give --model or --kernel, not both");
  for (const auto& m : opt.modes)
    if (m != "fwd" && m != "fwdbwd") throw Error("bench --kernel: --mode '" + m + "' is not one of fwd, fwdbwd");
  if (opt.n_heads <= 0 || kernel_head_dim(opt) <= 0)
    throw Error("bench --kernel: heads (" + std::to_string(opt.n_heads) + ") and head dim (" +
                std::to_string(kernel_head_dim(opt)) + ") must be > 0");
  for (auto it = opt.set.begin(); it != opt.set.end(); ++it)
    if (it.key() != "chunk_size")
      throw Error("bench --kernel: unknown --set key '" + it.key() + "' (kernel ops take chunk_size only)");
  kernel_chunk_size(opt);
  kernel_forms(op, opt.form);
}

std::vector<BenchRow> run_kernel_benchmarks(const BenchOptions& opt,
                                            const std::function<void(const BenchRow&)>& on_row) {
  const KernelOp& op = KernelOpRegistry::instance().at(opt.kernel);
  const torch::Device device = resolve_device(opt.device);
  const int64_t H = opt.n_heads, D = kernel_head_dim(opt), chunk = kernel_chunk_size(opt);
  const Conditions conditions;
  std::vector<BenchRow> rows;
  for (const std::string& mode : opt.modes)
    for (int64_t T : opt.seq_lens) {
      torch::manual_seed(opt.seed);
      KernelBenchInputs in = op.random_inputs(opt.batch, T, H, D);
      // --precision bf16: q, k, v in bf16, as a bf16 model hands them over (gates and states stay fp32).
      if (opt.precision == "bf16")
        for (auto& [name, t] : in.inputs)
          if (name == "q" || name == "k" || name == "v") t = t.to(torch::kBFloat16);
      for (const std::string& form : kernel_forms(op, opt.form)) {
        Measured m = measure_kernel(op, in, form, chunk, mode, measure_spec(opt), device);
        TimeStats st = time_stats(m.times_s);
        BenchRow r = timed_row(conditions, device, st, opt.repeats);
        r.model = op.name;
        r.mode = "kernel_" + mode;
        r.form = form;
        if (opt.precision == "bf16") r.dtype = "bf16";
        r.seq_len = T;
        r.batch = opt.batch;
        r.d_model = H * D;
        r.n_layers = 1;
        r.tokens_per_s = static_cast<double>(opt.batch * T) / st.median;
        r.peak_mem_mb = m.peak_mb;
        r.gflops = NAN;
        json extra = {{"scope", "kernel"}, {"kernel", op.name}, {"heads", H}, {"head_dim", D},
                      {"chunk_size", chunk}, {"params", in.params}, {"warmup", opt.warmup},
                      {"peak_mem_method", PeakMemoryProbe(device).method()},
                      {"cpu_allocator", conditions.cpu_allocator}, {"denormals", conditions.denormals}};
        r.config_json = extra.dump();
        rows.push_back(r);
        if (on_row) on_row(r);
      }
    }
  return rows;
}

}  // namespace

void validate(const BenchOptions& opt) {
  if (opt.model.empty() && opt.kernel.empty())
    throw Error("bench: --model (see `mnemo models`) or --kernel (a kernel op of `mnemo check-kernel`) is required");
  if (opt.seq_lens.empty()) throw Error("bench: --seq-lens is empty");
  for (int64_t T : opt.seq_lens)
    if (T <= 0) throw Error("bench: --seq-lens value " + std::to_string(T) + " must be > 0");
  if (opt.modes.empty()) throw Error("bench: --mode is empty");
  for (const auto& m : opt.modes)
    if (!kModes.count(m)) throw Error("bench: --mode '" + m + "' is not one of fwd, fwdbwd, decode");
  if (opt.batch <= 0) throw Error("bench: --batch " + std::to_string(opt.batch) + " must be > 0");
  if (opt.warmup < 0) throw Error("bench: --warmup " + std::to_string(opt.warmup) + " must be >= 0");
  if (opt.repeats <= 0) throw Error("bench: --repeats " + std::to_string(opt.repeats) + " must be > 0");
  if (opt.decode_tokens <= 0)
    throw Error("bench: --decode-tokens " + std::to_string(opt.decode_tokens) + " must be > 0");
  if (opt.vocab_size <= 1) throw Error("bench: vocab_size must be > 1");
  if (!opt.kernel.empty()) {
    validate_kernel(opt);
    return;
  }
  if (opt.scope != "model" && opt.scope != "mixer")
    throw Error("bench: --scope '" + opt.scope + "' is not one of model, mixer");
  if (opt.cuda_graph) {
    if (!cuda_graphs_available())
      throw Error("bench: --cuda-graph needs a mnemo built against a LibTorch with CUDA");
    if (opt.scope != "model") throw Error("bench: --cuda-graph times whole models (--scope model), not '" + opt.scope + "'");
    if (opt.device == "cpu") throw Error("bench: --cuda-graph needs a CUDA device, not --device cpu");
  }
  if (opt.doc_len < 0) throw Error("bench: --doc-len must be >= 0 (0: one sequence a row), got " + std::to_string(opt.doc_len));
  if (opt.doc_len > 0) {
    if (opt.scope != "model") throw Error("bench: --doc-len times whole models (--scope model), not '" + opt.scope + "'");
    if (opt.cuda_graph) throw Error("bench: --doc-len and --cuda-graph do not go together (the packed kernels read the document bounds on the host)");
    for (const auto& m : opt.modes)
      if (m == "decode") throw Error("bench: --doc-len times fwd and fwdbwd, not --mode decode");
  }
  if (!opt.form.empty() && opt.form != "chunk" && opt.form != "recurrent")
    throw Error("bench: --form '" + opt.form + "' is not one of chunk, recurrent");
  if (opt.device != "auto" && opt.device != "cpu" && opt.device.rfind("cuda", 0) != 0)
    throw Error("bench: --device '" + opt.device + "' is not one of cpu, cuda, auto");
  if (!opt.set.is_object()) throw Error("bench: --set must give key=value pairs");
  Precision p = Precision::fp32;
  try {
    p = parse_precision(opt.precision);
  } catch (const Error& e) {
    throw Error(std::string("bench: --precision: ") + e.what());
  }
  if (p == Precision::fp64) throw Error("bench: --precision fp64 is for training equivalence checks; bench fp32 or bf16");
}

json bench_model_config(const BenchOptions& opt) {
  json cfg = skeleton_defaults();
  cfg["model"] = opt.model;
  cfg["vocab_size"] = opt.vocab_size;
  const MixerKeys mixer_keys = model_mixer_keys(opt.model, opt.set.value("layers", json()));  // unknown model: Error
  cfg.update(mixer_keys.defaults);
  cfg["d_model"] = opt.d_model;
  cfg["n_layers"] = opt.n_layers;
  cfg["n_heads"] = opt.n_heads;
  apply_user_keys(cfg, mixer_keys, opt.set, {"bench: ", "--set key", "for model '" + opt.model + "'"});
  if (!opt.form.empty()) {
    if (!mixer_keys.contains("form")) {
      std::vector<std::string> mixers;
      for (const auto& m : model_config_from_json(cfg).layer_mixers()) mixers.push_back(m);
      throw Error("bench: --form " + opt.form + " given, but no mixer of model '" + opt.model + "' (" +
                  join(mixers) + ") has a 'form' argument");
    }
    cfg["form"] = opt.form;
  }
  return cfg;
}


double bench_flops(const ModelConfig& cfg, int64_t n_params, const std::string& mode, int64_t batch,
                   int64_t seq_len, int64_t decode_tokens) {
  const bool decode = mode == "decode";
  const double tokens = decode ? 1.0 : double(seq_len);
  const double forward = double(batch) * tokens *
                         forward_flops_per_token(cfg, n_params, decode ? seq_len : 0,
                                                 decode ? decode_tokens : seq_len, decode);
  return mode == "fwdbwd" ? 3.0 * forward : forward;
}

std::string bench_flop_formula() {
  return "B x tokens x forward FLOPs per token (fwdbwd = 3 x forward; decode = per generated token): " +
         flops_formula();
}

MeasureSpec measure_spec(const BenchOptions& opt) {
  MeasureSpec spec;
  spec.batch = opt.batch;
  spec.vocab_size = opt.vocab_size;
  spec.warmup = opt.warmup;
  spec.repeats = opt.repeats;
  spec.decode_tokens = opt.decode_tokens;
  spec.precision = opt.precision;
  spec.on_timed = opt.on_timed;
  spec.cuda_graph = opt.cuda_graph;
  spec.doc_len = opt.doc_len;
  spec.seed = opt.seed;
  return spec;
}

std::string bench_method_text(const BenchOptions& opt, const torch::Device& device) {
  std::ostringstream s;
  if (!opt.kernel.empty()) {
    s << "mnemo bench: kernel op " << opt.kernel << " alone (scope kernel), batch " << opt.batch << ", heads "
      << opt.n_heads << ", head dim " << kernel_head_dim(opt) << ", chunk " << kernel_chunk_size(opt)
      << ", forms " << join(kernel_forms(KernelOpRegistry::instance().at(opt.kernel), opt.form))
      << "; random inputs in the op's fixture layout and value ranges, the same inputs for every form\n";
  } else {
    s << "mnemo bench: model " << opt.model << ", batch " << opt.batch << ", d_model " << opt.d_model
      << ", n_layers " << opt.n_layers << ", n_heads " << opt.n_heads << ", vocab " << opt.vocab_size
      << (opt.form.empty() ? "" : ", form " + opt.form)
      << (opt.scope == "mixer" ? ", scope mixer (first layer's mixer alone on random [B, T, d_model] input; "
                                 "fwdbwd = backward of mean(y^2), no optimiser step; no GFLOP/s estimate)"
                               : "")
      << (opt.doc_len > 0 ? ", documents of 1 to " + std::to_string(2 * opt.doc_len - 1) +
                                " tokens (mean " + std::to_string(opt.doc_len) +
                                ") packed in each row, each from a fresh state (reset_state_at_bos)"
                          : "")
      << "\n";
  }
  s << "  device " << device.str() << ", precision "
    << (opt.kernel.empty() || opt.precision == "bf16" ? opt.precision : "fp32")
    << (opt.precision == "bf16" ? (opt.kernel.empty() ? " (bf16 autocast, fp32 recurrences and parameters)"
                                                       : " (q, k, v in bf16; gates and states in fp32)")
                                : "")
    << ", intra-op threads " << at::get_num_threads()
    << ", LibTorch " << torch_version() << ", git " << git_commit() << "\n";
  s << "  BLAS " << blas_library() << "\n";
  s << "  CPU allocator: " << allocator_description() << "\n";
  s << "  denormals: " << denormals_description() << "\n";
  s << "  timing: " << DeviceTimer::method(device)
    << (device.is_cuda() ? " (decode: monotonic clock with CUDA synchronize)" : "") << ", "
    << opt.warmup << " warm-up + " << opt.repeats
    << " timed repetitions, median (p20, p80)" << (opt.kernel.empty() ? "; random tokens" : "") << "\n";
  if (!opt.kernel.empty()) {
    s << "  kernel_fwd = the op under NoGradGuard; kernel_fwdbwd = the op + backward of the sum of mean(out^2) "
         "over its outputs to every floating input\n";
    s << "  tokens/s = B*T / median; no GFLOP/s estimate\n";
  } else {
    s << "  fwd = forward under NoGradGuard; fwdbwd = forward + cross-entropy backward + AdamW step; "
         "decode = prefill T-token prompt, then "
      << opt.decode_tokens << " greedy tokens one at a time (times per token)\n";
    if (opt.cuda_graph)
      s << "  CUDA graph: the step captured once after the warm-up (forward, backward, AdamW), each timed repetition "
           "one replay (rows fwd_graph, fwdbwd_graph); decode: the one-token step captured after the prompt, one "
           "replay per token (rows decode_graph; static decode steps only: Gated DeltaNet, DeltaNet, GLA, Mamba2, "
           "linear attention, RWKV-7, Kimi Delta Attention, Gated DeltaProduct, Mamba-3, MesaNet)\n";
    s << "  tokens/s = B*T / median (decode: B / median per-token time)\n";
    s << "  GFLOP/s estimate: " << bench_flop_formula() << "\n";
  }
  s << "  peak memory: " << PeakMemoryProbe(device).method() << "\n";
  return s.str();
}

std::vector<BenchRow> run_benchmarks(const BenchOptions& opt,
                                     const std::function<void(const BenchRow&)>& on_row) {
  validate(opt);
  if (!opt.kernel.empty()) return run_kernel_benchmarks(opt, on_row);
  json flat = bench_model_config(opt);
  torch::Device device = resolve_device(opt.device);
  torch::manual_seed(opt.seed);
  ModelConfig mc = model_config_from_json(flat);
  LanguageModel model(mc);
  model->to(device);
  std::shared_ptr<Mixer> first_mixer;  // scope "mixer": a fresh first-layer mixer
  if (opt.scope == "mixer") {
    torch::manual_seed(opt.seed);
    Block block(mc, 0);
    first_mixer = block->mixer;
    first_mixer->to(device);
  }
  const int64_t n_params = model->num_parameters();
  const Conditions conditions;

  const MeasureSpec spec = measure_spec(opt);
  if (opt.cuda_graph && !device.is_cuda())
    throw Error("bench: --cuda-graph needs a CUDA device (--device resolved to " + device.str() + ")");
  std::vector<BenchRow> rows;
  for (const std::string& mode : opt.modes) {
    for (int64_t T : opt.seq_lens) {
      Measured m = first_mixer ? measure_mixer(*first_mixer, spec, mode, T, mc.d_model, device)
                               : measure_model(model, spec, mode, T, device);
      TimeStats st = time_stats(m.times_s);
      BenchRow r = timed_row(conditions, device, st, opt.repeats);
      if (opt.precision == "bf16") r.dtype = "bf16-autocast";
      r.model = opt.model;
      r.mode = first_mixer ? "mixer_" + mode : opt.cuda_graph ? mode + "_graph" : opt.doc_len > 0 ? mode + "_packed" : mode;
      r.form = opt.form;
      r.seq_len = T;
      r.batch = opt.batch;
      r.d_model = mc.d_model;
      r.n_layers = mc.n_layers;
      double tokens = mode == "decode" ? static_cast<double>(opt.batch) : static_cast<double>(opt.batch * T);
      r.tokens_per_s = tokens / st.median;
      r.peak_mem_mb = m.peak_mb;
      double flops = first_mixer ? NAN : bench_flops(mc, n_params, mode, opt.batch, T, opt.decode_tokens);
      r.gflops = flops / st.median / 1e9;
      json extra = flat;
      extra["n_params"] = n_params;
      extra["warmup"] = opt.warmup;
      extra["flops_per_step"] = flops;
      extra["flop_formula"] = bench_flop_formula();
      extra["peak_mem_method"] = PeakMemoryProbe(device).method();
      extra["scope"] = opt.scope;
      extra["cuda_graph"] = opt.cuda_graph;
      if (opt.doc_len > 0) {
        extra["doc_len"] = opt.doc_len;
        extra["packed_route"] = model->packs_sequences(torch::empty({0}, device)) ? "one row" : "padded groups";
      }
      extra["cpu_allocator"] = conditions.cpu_allocator;
      extra["denormals"] = conditions.denormals;
      if (first_mixer) extra["mixer"] = mc.layer_mixers().front();
      if (mode == "decode") {
        extra["decode_tokens"] = opt.decode_tokens;
        extra["state_bytes"] = m.state_bytes;
        extra["prefill_ms"] = time_stats(m.prefill_s).median * 1e3;
      }
      r.config_json = extra.dump();
      rows.push_back(r);
      if (on_row) on_row(r);
    }
  }
  return rows;
}

}  // namespace mnemo
