// Benchmarks (docs/tasks.md#efficiency-benchmarks): throughput vs sequence length per model (log-log), one panel
// per mode (fwd, fwdbwd, decode), a table with latency percentiles and peak memory, and the
// machines the numbers were measured on.
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "reports/family_style.h"
#include "reports/small_multiples.h"
#include "reports/report.h"

namespace mnemo {

namespace {

const std::vector<std::string> kModeOrder = {"fwd",          "fwdbwd",       "decode",     "mixer_fwd",
                                             "mixer_fwdbwd", "mixer_decode", "kernel_fwd", "kernel_fwdbwd"};

std::string mode_title(const std::string& mode) {
  if (mode == "fwd") return "fwd: forward, no grad";
  if (mode == "fwdbwd") return "fwdbwd: forward + backward + AdamW step";
  if (mode == "decode") return "decode: greedy tokens after a T-token prompt";
  if (mode == "mixer_fwd") return "mixer_fwd: first-layer mixer alone, forward";
  if (mode == "mixer_fwdbwd") return "mixer_fwdbwd: first-layer mixer alone, forward + backward";
  if (mode == "mixer_decode") return "mixer_decode: first-layer mixer alone, per decoded token";
  if (mode == "kernel_fwd") return "kernel_fwd: one kernel op alone (bench --kernel), forward";
  if (mode == "kernel_fwdbwd") return "kernel_fwdbwd: one kernel op alone, forward + backward";
  return mode;
}

int mode_rank(const std::string& mode) {
  auto it = std::find(kModeOrder.begin(), kModeOrder.end(), mode);
  return static_cast<int>(it - kModeOrder.begin());
}

// Latest row per measured configuration.
std::vector<BenchRow> latest_rows(const std::vector<BenchRow>& all) {
  using Key = std::tuple<std::string, std::string, std::string, std::string, std::string, std::string,
                         int64_t, int64_t, int64_t, int64_t, int64_t>;
  std::map<Key, BenchRow> latest;
  for (const BenchRow& b : all)
    latest[{b.model, b.mode, b.form, b.device, b.dtype, b.host, b.batch, b.d_model, b.n_layers,
            b.threads, b.seq_len}] = b;  // rows come in id order: the last one wins
  std::vector<BenchRow> rows;
  for (auto& [k, b] : latest) rows.push_back(b);
  std::stable_sort(rows.begin(), rows.end(), [](const BenchRow& a, const BenchRow& b) {
    return std::make_tuple(mode_rank(a.mode), a.mode, a.model, a.form, a.d_model, a.batch, a.seq_len) <
           std::make_tuple(mode_rank(b.mode), b.mode, b.model, b.form, b.d_model, b.batch, b.seq_len);
  });
  return rows;
}

json bench_config(const BenchRow& b) {
  try {
    json c = json::parse(b.config_json.empty() ? std::string("{}") : b.config_json);
    return c.is_object() ? c : json::object();
  } catch (const std::exception&) {
    return json::object();
  }
}

void bench_section(ReportContext& ctx) {
  // A row of a family's variant (bench --set mamba_mimo_rank=4) is a model of its own: "mamba3 (MIMO rank 4)".
  std::vector<BenchRow> all = ctx.db.benches();
  for (BenchRow& b : all) b.model = run_label(bench_config(b), b.model);
  std::vector<BenchRow> rows = latest_rows(all);
  if (rows.empty()) return;

  // Legend labels: the model, plus whichever settings vary between rows.
  std::set<std::string> forms, devices;
  std::set<int64_t> dims, batches, layers, threads;
  for (const BenchRow& b : rows) {
    forms.insert(b.form);
    devices.insert(b.device);
    dims.insert(b.d_model);
    batches.insert(b.batch);
    layers.insert(b.n_layers);
    threads.insert(b.threads);
  }
  auto label = [&](const BenchRow& b) {
    std::string s = b.model;
    if (!b.form.empty()) s += " (" + b.form + ")";
    if (dims.size() > 1) s += " d=" + std::to_string(b.d_model);
    if (layers.size() > 1) s += " L=" + std::to_string(b.n_layers);
    if (batches.size() > 1) s += " B=" + std::to_string(b.batch);
    if (devices.size() > 1) s += " " + b.device;
    if (threads.size() > 1) s += " " + std::to_string(b.threads) + "thr";
    return s;
  };

  std::map<std::string, std::map<std::string, Series>> by_mode, memory_by_mode;
  for (const BenchRow& b : rows) {
    Series& s = by_mode[b.mode][label(b)];
    s.label = label(b);
    s.family = b.model;
    s.x.push_back(double(b.seq_len));
    s.y.push_back(b.tokens_per_s);
    Series& m = memory_by_mode[b.mode][label(b)];
    m.label = label(b);
    m.family = b.model;
    m.x.push_back(double(b.seq_len));
    m.y.push_back(b.peak_mem_mb);
  }
  auto panels_of = [&](std::map<std::string, std::map<std::string, Series>>& modes) {
    std::vector<std::pair<std::string, Panel>> ordered;
    for (auto& [mode, series] : modes) {
      Panel p{mode_title(mode), {}};
      for (auto& [l, s] : series) p.series.push_back(s);
      ordered.emplace_back(mode, std::move(p));
    }
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const auto& a, const auto& b) { return mode_rank(a.first) < mode_rank(b.first); });
    std::vector<Panel> panels;
    for (auto& [m, p] : ordered) panels.push_back(std::move(p));
    return panels;
  };

  ctx.md << "## Benchmarks\n\n";
  ctx.md << "Random tokens (vocabulary 256), timed with a monotonic clock after warm-up; "
            "median over repeats (p20/p80 alongside). tokens/s = batch x T / median step time for "
            "fwd and fwdbwd; for decode, T is the prompt length and tokens/s = batch / median "
            "per-token decode time. Peak memory: CPU = growth of the process's peak resident set "
            "(VmHWM) during the measurement, CUDA = max_memory_allocated. The latest row of each "
            "configuration is shown. Rows of `bench --kernel` (modes kernel_*) time one kernel op on random "
            "inputs [B, T, heads, head dim] in each of its forms; their d_model is heads x head dim.\n\n";

  // Where the numbers come from.
  std::set<std::tuple<std::string, std::string, int64_t, std::string, std::string, std::string, std::string>> machines;
  for (const BenchRow& b : rows)
    machines.insert({b.host, b.device, b.threads, b.blas, b.torch_version, b.dtype, b.git_commit});
  std::vector<std::vector<std::string>> machine_rows;
  for (const auto& [host, device, thr, blas, torch_v, dtype, commit] : machines)
    machine_rows.push_back({host, device, std::to_string(thr), blas, torch_v, dtype, commit});
  ctx.md << "Measured on:\n\n"
         << markdown_table({"host", "device", "threads", "BLAS", "LibTorch", "dtype", "git commit"},
                           machine_rows)
         << "\n";
  std::set<std::string> formulas;
  for (const BenchRow& b : rows) {
    json c = bench_config(b);
    if (c.contains("flop_formula") && c["flop_formula"].is_string())
      formulas.insert(c["flop_formula"].get<std::string>());
  }
  for (const auto& f : formulas) ctx.md << "- GFLOP/s estimate: " << f << "\n";
  if (!formulas.empty()) ctx.md << "\n";

  LinePlot plot;
  plot.name = "bench_throughput";
  plot.title = "Throughput vs sequence length";
  plot.xlabel = "sequence length T (decode: prompt length)";
  plot.ylabel = "tokens/s";
  plot.log_x = 2;
  plot.log_y = 10;
  plot.panels = panels_of(by_mode);
  const LinePlot unsplit = plot;
  split_panels_by_group(plot);
  ctx.add_figure(plot_lines(plot, ctx.figure_dir), "Throughput (tokens/s) vs sequence length, one panel per mode");

  bool any_memory = false;
  for (const BenchRow& b : rows) any_memory = any_memory || (std::isfinite(b.peak_mem_mb) && b.peak_mem_mb > 0);
  if (any_memory) {
    LinePlot mem = unsplit;
    mem.name = "bench_peak_memory";
    mem.title = "Peak memory vs sequence length";
    mem.ylabel = "peak memory (MB)";
    mem.panels = panels_of(memory_by_mode);
    split_panels_by_group(mem);
    ctx.add_figure(plot_lines(mem, ctx.figure_dir), "Peak memory (MB) vs sequence length, one panel per mode");
  }

  std::vector<std::vector<std::string>> table;
  for (const BenchRow& b : rows) {
    json c = bench_config(b);
    auto state = config_number(c, "state_bytes");
    auto prefill = config_number(c, "prefill_ms");
    // What was measured in two text cells (mode · form · device · dtype; B × T, d_model × layers, threads), so the
    // table's eleven columns fit a 1280-px page without scrolling.
    const std::string setting =
        b.mode + " · " + (b.form.empty() ? std::string("-") : b.form) + " · " + b.device + " · " + b.dtype;
    const std::string shape = std::to_string(b.batch) + " × " + std::to_string(b.seq_len) + ", d " +
                              std::to_string(b.d_model) + " × " + std::to_string(b.n_layers) + " layers, " +
                              std::to_string(b.threads) + (b.threads == 1 ? " thread" : " threads");
    table.push_back({b.model, setting, shape, format_number(b.median_ms, 3), format_number(b.p20_ms, 3),
                     format_number(b.p80_ms, 3), format_count(b.tokens_per_s), format_number(b.peak_mem_mb, 1),
                     format_number(b.gflops, 2), prefill ? format_number(*prefill, 2) : "-",
                     state ? format_number(*state / (1024.0 * 1024.0), 3) : "-"});
  }
  ctx.md << "Times in ms (decode: per generated token); state MB = decode state/cache after the "
            "prompt. Setting: mode · form · device · dtype; shape: batch × sequence length, d_model × layers, "
            "threads.\n\n";
  ctx.md << markdown_table({"model", "setting", "shape", "median ms", "p20 ms", "p80 ms", "tokens/s", "peak MB",
                            "GFLOP/s", "prefill ms", "state MB"},
                           table)
         << "\n";
}

}  // namespace

void register_benchmark_section() { register_report_section("benchmarks", 90, bench_section); }

}  // namespace mnemo
