// `mnemo bench --model NAME [--seq-lens 512,1024,2048,4096] [--batch B] [--d-model D]
//   [--n-layers L] [--n-heads H] [--mode fwd|fwdbwd|decode[,...]] [--form chunk|recurrent] [--scope model|mixer]
//   [--warmup 2] [--repeats 5] [--set key=value]... [--db FILE] [--device cpu|cuda|auto]`
// `mnemo bench --kernel OP [--n-heads H] [--head-dim D] [--form F] [--set chunk_size=N] ...`: one kernel op alone.
#include <map>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <tuple>
#include <memory>
#include <sstream>

#include "cli/commands/commands.h"
#include "core/parse_int.h"
#include "core/defaults.h"
#include "engine/tools/bench.h"
#include "engine/tools/op_profile.h"
#include "runtime/device.h"
#include "runtime/ops/kernel_ops.h"
#include "runtime/kernels/kernel_counts.h"

namespace mnemo::cli {

namespace {

struct BenchArgs {
  BenchOptions opt;
  std::string seq_lens = "512,1024,2048,4096";
  std::string modes = "fwd";
  std::vector<std::string> sets;
  std::string db = kDefaultDbPath;
  bool no_db = false;
  bool profile = false;
  std::string profile_trace;  // chrome trace path (implies --profile)
  int profile_top = 20;
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> parse_lengths(const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(text)) {
    const auto v = parse_whole_int(item);
    if (!v || *v <= 0) throw Error("bench: --seq-lens entry '" + item + "' is not a positive integer");
    out.push_back(*v);
  }
  if (out.empty()) throw Error("bench: --seq-lens '" + text + "' lists no length");
  return out;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void print_row(const BenchRow& r) {
  json c = json::parse(r.config_json);
  std::string extra;
  if (r.mode == "decode" || r.mode == "mixer_decode") {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  prefill %.2f ms, state %.3f MB", c.value("prefill_ms", NAN),
                  c.value("state_bytes", int64_t{0}) / (1024.0 * 1024.0));
    extra = buf;
  }
  const std::string label = r.mode.rfind("kernel_", 0) == 0 ? r.mode + " " + r.form : r.mode;
  std::printf("%-23s %7lld %5lld %11.3f %11.3f %11.3f %12.0f %10.1f %9.2f%s\n", label.c_str(),
              (long long)r.seq_len, (long long)r.batch, r.median_ms, r.p20_ms, r.p80_ms, r.tokens_per_s,
              r.peak_mem_mb, r.gflops, extra.c_str());
  std::fflush(stdout);
}

// Kernel scope: each form's median vs the recurrent form's at the same (mode, T).
void print_form_speedups(const std::vector<BenchRow>& rows) {
  std::map<std::pair<std::string, int64_t>, double> recurrent;
  for (const auto& r : rows)
    if (r.form == "recurrent") recurrent[{r.mode, r.seq_len}] = r.median_ms;
  bool header = false;
  for (const auto& r : rows) {
    auto it = recurrent.find({r.mode, r.seq_len});
    if (r.form == "recurrent" || it == recurrent.end()) continue;
    if (!header) std::printf("\nspeed-up over the recurrent form (recurrent median / form median):\n");
    header = true;
    std::printf("  %-13s T=%-6lld %-10s %.1fx\n", r.mode.c_str(), (long long)r.seq_len, r.form.c_str(),
                it->second / r.median_ms);
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Measure throughput, latency and peak memory of a model on random tokens");
  sub->add_option("--model", a->opt.model, "Model family (see `mnemo models`)");
  sub->add_option("--kernel", a->opt.kernel,
                  "Instead of --model: one kernel op alone on random [B, T, H, D] inputs, every form unless --form; "
                  "rows get mode kernel_<mode> (ops: " + join_names(KernelOpRegistry::instance().names()) + ")");
  sub->add_option("--head-dim", a->opt.head_dim, "Kernel scope: head dim D (default d_model / n_heads)");
  sub->add_option("--seq-lens", a->seq_lens, "Comma-separated sequence lengths (decode: prompt lengths)")
      ->capture_default_str();
  sub->add_option("--batch", a->opt.batch, "Batch size")->capture_default_str();
  auto* d_model_opt = sub->add_option("--d-model", a->opt.d_model, "Model width")->capture_default_str();
  auto* n_layers_opt = sub->add_option("--n-layers", a->opt.n_layers, "Number of blocks")->capture_default_str();
  auto* n_heads_opt = sub->add_option("--n-heads", a->opt.n_heads, "Number of heads")->capture_default_str();
  auto* vocab_opt = sub->add_option("--vocab-size", a->opt.vocab_size, "Vocabulary (random tokens below it)")
                        ->capture_default_str();
  sub->add_option("--mode", a->modes, "fwd | fwdbwd | decode (comma-separated for several)")->capture_default_str();
  sub->add_option("--form", a->opt.form,
                  "chunk | recurrent (recurrent families' computation form); with --kernel one of the op's forms");
  sub->add_option("--scope", a->opt.scope,
                  "model (default: the whole language model) | mixer (the first layer's mixer alone on random "
                  "activations; rows get mode mixer_<mode>)");
  sub->add_option("--warmup", a->opt.warmup, "Untimed repetitions before timing")->capture_default_str();
  sub->add_option("--repeats", a->opt.repeats, "Timed repetitions")->capture_default_str();
  sub->add_option("--decode-tokens", a->opt.decode_tokens, "Tokens generated per decode repetition")
      ->capture_default_str();
  sub->add_option("--set", a->sets, "Extra config key: key=value (repeatable)");
  sub->add_option("--db", a->db, "Results database")->capture_default_str();
  sub->add_flag("--no-db", a->no_db, "Do not record the rows");
  sub->add_option("--device", a->opt.device, "cpu | cuda | cuda:N | auto")->capture_default_str();
  sub->add_option("--precision", a->opt.precision,
                  "fp32 | bf16 (bf16 autocast: matmuls in bf16, recurrences in fp32; model and mixer scopes)")
      ->capture_default_str();
  sub->add_option("--seed", a->opt.seed, "Seed of the model initialisation and random tokens")->capture_default_str();
  sub->add_flag("--cuda-graph", a->opt.cuda_graph,
                "CUDA: capture the fwd / fwdbwd step once as a CUDA graph after the warm-up and time its replays "
                "(rows fwd_graph, fwdbwd_graph): what the launch-bound small models of the synthetic sweeps gain; "
                "decode: the one-token step captured after the prompt (rows decode_graph; Gated DeltaNet, DeltaNet, "
                "GLA, Mamba2)");
  sub->add_option("--doc-len", a->opt.doc_len,
                  "Model scope, fwd/fwdbwd: cut each row into documents of mean length N (1 to 2N-1 tokens) and run "
                  "them as packed sequences, each from a fresh state, as reset_state_at_bos trains (rows "
                  "fwd_packed, fwdbwd_packed; 0: one sequence a row)")
      ->capture_default_str();
  sub->add_flag("--profile", a->profile,
                "Run under the PyTorch profiler: print host self time by operator and (CUDA) kernel time by "
                "launching operator");
  sub->add_option("--profile-trace", a->profile_trace,
                  "With --profile: save the chrome trace of the first measurement to this file (needs a LibTorch built with Kineto)");
  sub->add_option("--profile-top", a->profile_top, "Lines per profile table")->capture_default_str();
  sub->callback([a, d_model_opt, n_layers_opt, n_heads_opt, vocab_opt] {
    BenchOptions opt = a->opt;
    opt.seq_lens = parse_lengths(a->seq_lens);
    opt.modes = split_list(a->modes);
    opt.set = set_pairs_to_json(a->sets);
    // A key that a dedicated flag also sets: --set wins over the flag's default; both given is an error.
    for (auto [key, flag, value] : {std::tuple{"d_model", d_model_opt, &opt.d_model},
                                    std::tuple{"n_layers", n_layers_opt, &opt.n_layers},
                                    std::tuple{"n_heads", n_heads_opt, &opt.n_heads},
                                    std::tuple{"vocab_size", vocab_opt, &opt.vocab_size}}) {
      if (!opt.set.contains(key)) continue;
      if (flag->count() > 0)
        throw Error(std::string("bench: ") + key + " is given twice (" + flag->get_name() + " and --set " + key + ")");
      if (!opt.set[key].is_number_integer() || opt.set[key].get<int64_t>() < 1)
        throw Error(std::string("bench: --set ") + key + " expects a positive integer, got " + json_excerpt(opt.set[key]));
      *value = opt.set[key].get<int64_t>();
      opt.set.erase(key);
    }
    validate(opt);
    if (opt.kernel.empty()) bench_model_config(opt);  // unknown model / keys fail before anything is printed
    torch::Device device = resolve_device(opt.device);
    std::unique_ptr<ResultsDB> db;
    if (!a->no_db) db = std::make_unique<ResultsDB>(a->db);

    std::cout << bench_method_text(opt, device) << "\n";
    std::printf("%-23s %7s %5s %11s %11s %11s %12s %10s %9s\n", "mode", "T", "B", "median ms", "p20 ms",
                "p80 ms", "tokens/s", "peak MB", "GFLOP/s");
    std::unique_ptr<OpProfiler> profiler;
    if (a->profile || !a->profile_trace.empty()) {
      profiler = std::make_unique<OpProfiler>(device);
      opt.on_timed = [&profiler](bool begin) { begin ? profiler->resume() : profiler->pause(); };
    }
    reset_kernel_pass_counts();
    auto rows = run_benchmarks(opt, [&](const BenchRow& r) {
      print_row(r);
      if (db) db->add_bench(r);
    });
    if (profiler) {
      std::cout << format_profile(profiler->tables(), a->profile_top);
      if (!a->profile_trace.empty()) {
        profiler->save_trace(a->profile_trace);
        std::cout << "chrome trace: " << a->profile_trace << "\n";
      }
    }
    if (!opt.kernel.empty()) print_form_speedups(rows);
    // Which fused kernel passes the timed runs (and their warm-ups) took: e.g. a bf16 run on CUDA shows its
    // delta-rule passes with bf16 products (runtime/kernels/kernel_counts.h).
    if (const std::string passes = describe_kernel_pass_counts(); !passes.empty())
      std::cout << "fused kernel passes: " << passes << "\n";
    if (db) std::cout << "\n" << rows.size() << " rows recorded in " << db->path() << "\n";
  });
}

}  // namespace mnemo::cli
