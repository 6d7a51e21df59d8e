// Language modelling (docs/tasks.md#language-modelling, docs/reproducing.md#comparing-with-the-papers): a table of every LM run (task "lm"),
// validation perplexity vs parameters, training FLOPs and tokens seen, length extrapolation from
// `mnemo eval --task lm_ppl`, and the papers' Wiki. ppl beside ours — compared as a ranking of
// families only (Kendall τ-b), never in the same column.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "reports/family_style.h"
#include "reports/small_multiples.h"
#include "reports/lm_papers.h"
#include "reports/rank_stats.h"
#include "reports/report.h"

namespace mnemo {

namespace {

constexpr size_t kMaxLines = 8;   // lines per panel
constexpr size_t kMaxPanels = 9;  // panels per figure

// The papers' numbers: reports/lm_papers.h.

const char* kFlopsFormula =
    "FLOPs = 6·N·D + 3·D·Σ_layers f_mixer(T), N = parameters without the embedding, D = training "
    "tokens, f_mixer = the mixer's forward FLOPs per token beyond its projections: attention 2·T·d "
    "(causal average over a context T; sliding window 2·min(W,T)·d), chunked linear recurrences "
    "2·C·d + 4·d·d_h (chunk C, head dim d_h), deep memories + the inner-gradient step (3× the memory "
    "MLP's forward per token)";

// ---- Our runs ----
struct LmRun {
  RunInfo run;
  std::string family, size_key, layers_d, corpus, tokenizer, group, status, steps;
  int64_t seq_len = 0;
  double params = NAN, tokens = NAN, flops = NAN, final_ppl = NAN, best_ppl = NAN, bpb = NAN, tok_s = NAN;
  Series curve;  // val ppl vs training tokens seen
};

double first_finite(std::initializer_list<double> vs) {
  for (double v : vs)
    if (std::isfinite(v)) return v;
  return NAN;
}
double last_value(const std::map<int64_t, double>& m) { return m.empty() ? NAN : m.rbegin()->second; }
std::string integer(double v) { return std::isfinite(v) ? std::to_string(static_cast<int64_t>(v)) : "?"; }
std::string ppl(double v) { return format_number(v, 2); }
std::string sci(double v) {
  if (!std::isfinite(v)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}
std::string length_label(int64_t L) {
  if (L <= 0) return "not stated";
  return L >= 1024 && L % 1024 == 0 ? std::to_string(L / 1024) + "K" : std::to_string(L);
}

LmRun load_run(ReportContext& ctx, const RunInfo& run) {
  LmRun r;
  r.run = run;
  json cfg = run_config(ctx.db, run);
  r.family = run_label(cfg, config_string(cfg, "model", run.model));  // e.g. "mamba3 (MIMO rank 4)"
  r.seq_len = static_cast<int64_t>(config_number(cfg, "seq_len").value_or(0));
  r.layers_d = integer(config_number(cfg, "n_layers").value_or(NAN)) + "×" +
               integer(config_number(cfg, "d_model").value_or(NAN));
  std::string size = config_string(cfg, "size", "");
  r.size_key = size.empty() ? r.layers_d : size;
  r.corpus = config_string(cfg, "corpus", "?");
  r.tokenizer = config_string(cfg, "tokenizer", "?");
  r.group = r.corpus + ", " + r.tokenizer + ", context " + std::to_string(r.seq_len);
  r.params = run.n_params > 0 ? static_cast<double>(run.n_params) : NAN;
  r.status = ctx.db.observed_status(run);
  double steps = config_number(cfg, "steps").value_or(NAN);
  r.steps = std::isfinite(steps) && run.last_step != static_cast<int64_t>(steps)
                ? std::to_string(run.last_step) + "/" + integer(steps)
                : std::to_string(run.last_step);
  // Tokens per optimiser step: the fallback when a step has no recorded token count.
  double per_step = config_number(cfg, "batch_size").value_or(NAN) *
                    config_number(cfg, "grad_accum").value_or(1) * static_cast<double>(r.seq_len);

  std::map<std::string, double> summary;  // finite values only, as every series here
  std::map<int64_t, double> val_ppl, val_bpb, val_tokens, train_tokens, tok_s;
  for (const MetricRow& m : ctx.db.metrics(run.id)) {
    if (!std::isfinite(m.value)) continue;
    if (m.split == "summary") summary[m.name] = m.value;
    else if (m.split == "val" && m.name == "ppl") val_ppl[m.step] = m.value;
    else if (m.split == "val" && m.name == "bpb") val_bpb[m.step] = m.value;
    else if (m.split == "val" && m.name == "tokens") val_tokens[m.step] = m.value;
    else if (m.split == "train" && m.name == "tokens") train_tokens[m.step] = m.value;
    else if (m.split == "train" && m.name == "tokens_per_s") tok_s[m.step] = m.value;
  }
  auto sum = [&](const char* name) { return summary.count(name) ? summary[name] : NAN; };
  auto tokens_at = [&](int64_t step) {
    if (auto it = val_tokens.find(step); it != val_tokens.end()) return it->second;
    if (auto it = train_tokens.find(step); it != train_tokens.end()) return it->second;
    return step * per_step;
  };
  double min_ppl = NAN;
  for (const auto& [step, v] : val_ppl) {
    min_ppl = std::isnan(min_ppl) ? v : std::min(min_ppl, v);
    double x = tokens_at(step);
    if (std::isfinite(x)) r.curve.x.push_back(x), r.curve.y.push_back(v);
  }
  r.tokens = first_finite({sum("train_tokens"), last_value(train_tokens), run.last_step * per_step});
  r.flops = sum("flops");
  r.final_ppl = first_finite({sum("final_val_ppl"), last_value(val_ppl)});
  r.best_ppl = first_finite({sum("best_val_ppl"), min_ppl});
  r.bpb = first_finite({sum("final_val_bpb"), last_value(val_bpb)});
  r.tok_s = first_finite({sum("tokens_per_s"), last_value(tok_s)});
  return r;
}

// Median parameter count of the runs of each size key (orders sizes).
std::map<std::string, double> size_params(const std::vector<const LmRun*>& runs) {
  std::map<std::string, std::vector<double>> all;
  for (const LmRun* r : runs)
    if (std::isfinite(r->params)) all[r->size_key].push_back(r->params);
  std::map<std::string, double> out;
  for (auto& [k, v] : all) {
    std::sort(v.begin(), v.end());
    out[k] = v[v.size() / 2];
  }
  return out;
}

// A log-log line plot sized for a legend outside the plot area (model labels are long).
LinePlot lm_plot(const std::string& name, const std::string& title, const std::string& xlabel,
                 const std::string& ylabel) {
  LinePlot plot;
  plot.name = name;
  plot.title = title;
  plot.xlabel = xlabel;
  plot.ylabel = ylabel;
  plot.log_x = plot.log_y = 10;
  plot.columns = 2;
  plot.panel_width = 600;
  plot.panel_height = 420;
  return plot;
}

// plot_lines with the log y axis fitted to the data (gnuplot widens a log axis to whole decades, which squeezes
// perplexities between 4 and 12 into a sliver).
Figure plot_lm(LinePlot plot, const std::string& dir) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& panel : plot.panels)
    for (const auto& series : panel.series)
      for (double y : series.y)
        if (std::isfinite(y) && y > 0) lo = std::min(lo, y), hi = std::max(hi, y);
  if (plot.log_y > 0 && std::isfinite(lo) && !plot.ymin && !plot.ymax) {
    plot.ymin = lo / 1.15;
    plot.ymax = hi * 1.15;
  }
  return plot_lines(plot, dir);
}

// Split series into panels of at most kMaxLines lines: one panel per model group (family_style.h).
std::vector<Panel> chunk_panels(const std::string& title, const std::vector<Series>& series) {
  if (series.size() <= kMaxLines) return {Panel{title, series}};
  std::vector<Panel> out;
  for (SeriesGroup& g : split_by_family_group(series, kMaxLines)) {
    const std::string group = g.group.empty() ? "other series" : g.group;
    out.push_back(Panel{title.empty() ? group : title + " · " + group, std::move(g.series)});
  }
  return out;
}

std::string id_list(const std::vector<const LmRun*>& runs) {
  std::string s;
  for (const LmRun* r : runs) s += (s.empty() ? "#" : ", #") + std::to_string(r->run.id);
  return s;
}

void runs_table(ReportContext& ctx, std::vector<LmRun>& runs) {
  std::sort(runs.begin(), runs.end(), [](const LmRun& a, const LmRun& b) {
    if (a.group != b.group) return a.group < b.group;
    if (a.family != b.family) return a.family < b.family;
    return a.params != b.params ? a.params < b.params : a.run.id < b.run.id;
  });
  std::vector<std::vector<std::string>> rows;
  for (const LmRun& r : runs)
    rows.push_back({std::to_string(r.run.id), r.family, r.size_key, format_count(r.params), r.layers_d,
                    std::to_string(r.seq_len), format_count(r.tokens), r.tokenizer, r.corpus, r.steps,
                    ppl(r.final_ppl), format_number(r.bpb, 3), ppl(r.best_ppl), format_count(r.tok_s), r.status});
  ctx.md << markdown_table({"run", "model", "size", "params", "layers×d_model", "context", "tokens trained",
                            "tokenizer", "corpus", "steps", "final val ppl", "val bpb", "best val ppl",
                            "tokens/s", "status"},
                           rows)
         << "\n";
}

// Best (lowest final ppl) run per (size, family) of a group.
using BestMap = std::map<std::string, std::map<std::string, const LmRun*>>;
BestMap best_per_size(const std::vector<const LmRun*>& runs) {
  BestMap best;
  for (const LmRun* r : runs) {
    if (!std::isfinite(r->final_ppl)) continue;
    const LmRun*& b = best[r->size_key][r->family];
    if (!b || r->final_ppl < b->final_ppl) b = r;
  }
  return best;
}

void scaling_figures(ReportContext& ctx, const std::vector<const LmRun*>& group, const std::string& label) {
  BestMap best = best_per_size(group);
  for (bool by_flops : {false, true}) {
    std::map<std::string, Series> fam;
    for (const auto& [size, per_family] : best)
      for (const auto& [family, r] : per_family) {
        double x = by_flops ? r->flops : r->params;
        if (!std::isfinite(x)) continue;
        fam[family].label = fam[family].family = family;
        fam[family].x.push_back(x);
        fam[family].y.push_back(r->final_ppl);
      }
    if (fam.empty()) {
      ctx.md << "No run of this group records " << (by_flops ? "a FLOPs estimate" : "a parameter count")
             << ": no figure.\n\n";
      continue;
    }
    std::vector<Series> series;
    for (auto& [f, s] : fam) series.push_back(s);
    LinePlot plot = lm_plot(by_flops ? "lm_ppl_vs_flops" : "lm_ppl_vs_params",
                            std::string("Validation perplexity vs ") + (by_flops ? "training FLOPs" : "parameters"),
                            by_flops ? "training FLOPs (estimate)" : "parameters", "final validation perplexity");
    plot.panels = chunk_panels("", series);
    ctx.add_figure(plot_lm(plot, ctx.figure_dir),
                   plot.title + " (log–log; " + label + "; one line per model family over its sizes, the "
                   "best run of each size)");
  }
}

void curve_figure(ReportContext& ctx, const std::vector<LmRun>& runs, bool several_groups) {
  std::vector<const LmRun*> with_curve;
  for (const LmRun& r : runs)
    if (!r.curve.x.empty()) with_curve.push_back(&r);
  if (with_curve.empty()) return;
  std::vector<Panel> panels;
  std::string note;
  if (with_curve.size() <= kMaxLines) {
    Panel p;
    for (const LmRun* r : with_curve) {
      Series s = r->curve;
      s.label = r->family + " " + r->size_key + " (#" + std::to_string(r->run.id) + ")";
      s.family = r->family;
      p.series.push_back(std::move(s));
    }
    panels.push_back(std::move(p));
  } else {
    // One panel per (group, size), the best run of each family there; sizes by parameters.
    std::map<std::string, std::vector<const LmRun*>> by_group;
    for (const LmRun* r : with_curve) by_group[r->group].push_back(r);
    for (auto& [g, members] : by_group) {
      auto params = size_params(members);
      BestMap best;
      for (const LmRun* r : members) {
        const LmRun*& b = best[r->size_key][r->family];
        if (!b || (std::isfinite(r->final_ppl) && !(b->final_ppl <= r->final_ppl))) b = r;
      }
      std::vector<std::pair<double, std::string>> sizes;
      for (auto& [size, fams] : best) sizes.push_back({params.count(size) ? params[size] : 0.0, size});
      std::sort(sizes.begin(), sizes.end());
      for (auto& [p, size] : sizes) {
        std::vector<Series> series;
        for (auto& [family, r] : best[size]) {
          Series s = r->curve;
          s.label = s.family = family;
          series.push_back(std::move(s));
        }
        for (Panel& panel : chunk_panels((several_groups ? g + ", " : "") + "size " + size, series))
          panels.push_back(std::move(panel));
      }
    }
    note = "More than " + std::to_string(kMaxLines) +
           " runs: one panel per size, showing the run with the lowest final validation perplexity of each "
           "family.";
    if (panels.size() > kMaxPanels) {
      note += " Only the first " + std::to_string(kMaxPanels) + " of " + std::to_string(panels.size()) +
              " panels are drawn.";
      panels.resize(kMaxPanels);
    }
  }
  LinePlot plot = lm_plot("lm_val_ppl_vs_tokens", "Validation perplexity vs training tokens",
                          "training tokens seen", "validation perplexity");
  plot.points = false;
  plot.panels = std::move(panels);
  if (!note.empty()) ctx.md << note << "\n\n";
  ctx.add_figure(plot_lm(plot, ctx.figure_dir),
                 "Validation perplexity vs training tokens seen (log–log), one line per run");
}

// ---- Length extrapolation (evals rows of `mnemo eval --task lm_ppl`) ----
struct Extrapolation {
  std::map<int64_t, double> by_length;                   // L -> ppl
  std::map<int64_t, std::pair<double, double>> buckets;  // bucket start -> (mid position, ppl) at the longest L
  int64_t bucket_length = 0, train_seq_len = 0;
  std::string family;
};

void extrapolation(ReportContext& ctx, const std::vector<EvalRow>& rows, const std::map<int64_t, const LmRun*>& by_id) {
  // corpus -> model label -> data; the latest row (highest id) wins per cell.
  std::map<std::string, std::map<std::string, Extrapolation>> data;
  int skipped = 0;
  for (const EvalRow& e : rows) {
    if (e.metric != "ppl" && e.metric != "ppl_bucket") continue;
    json s = json::parse(e.setting_json.empty() ? "{}" : e.setting_json, nullptr, false);
    if (!s.is_object() || !s.contains("length") || !s["length"].is_number()) {
      ++skipped;
      continue;
    }
    std::string label;
    auto run = by_id.find(e.run_id);
    if (e.run_id > 0 && run != by_id.end())
      label = run->second->family + " " + run->second->size_key + " (#" + std::to_string(e.run_id) + ")";
    else if (e.run_id > 0)
      label = e.model + " (#" + std::to_string(e.run_id) + ")";
    else
      label = e.model + " @ " + std::filesystem::path(e.checkpoint).filename().string();
    Extrapolation& x = data[config_string(s, "corpus", "?")][label];
    x.family = e.run_id > 0 && run != by_id.end() ? run->second->family : e.model;
    auto L = static_cast<int64_t>(s["length"].get<double>());
    x.train_seq_len = static_cast<int64_t>(config_number(s, "train_seq_len").value_or(x.train_seq_len));
    if (e.metric == "ppl") {
      x.by_length[L] = e.value;
    } else if (auto b0 = config_number(s, "bucket_start"), b1 = config_number(s, "bucket_end"); b0 && b1) {
      if (L > x.bucket_length) x.buckets.clear(), x.bucket_length = L;
      if (L == x.bucket_length) x.buckets[static_cast<int64_t>(*b0)] = {(*b0 + *b1) / 2, e.value};
    }
  }
  if (data.empty()) return;
  ctx.md << "### Length extrapolation\n\n";
  ctx.md << "`mnemo eval --task lm_ppl` (docs/tasks.md#language-modelling): the evaluation corpus cut into non-overlapping "
            "blocks of each length L, one forward per block; perplexity per L, and per position bucket of the "
            "longest L. The vertical line marks the training context.\n\n";
  if (skipped) ctx.md << skipped << " lm_ppl rows without a numeric length in their setting were left out.\n\n";

  for (bool buckets : {false, true}) {
    LinePlot plot = lm_plot(buckets ? "lm_extrapolation_buckets" : "lm_extrapolation_length",
                            buckets ? "Perplexity per position bucket (longest length)"
                                    : "Perplexity vs evaluation length",
                            buckets ? "position in the sequence (bucket middle)" : "evaluation length L (tokens)",
                            "perplexity");
    plot.log_x = buckets ? 0 : 2;
    for (auto& [corpus, models] : data) {
      std::vector<Series> series;
      std::set<int64_t> contexts;
      double lo = INFINITY, hi = -INFINITY;
      for (auto& [label, x] : models) {
        Series s;
        s.label = label;
        s.family = x.family;
        if (buckets)
          for (auto& [start, mid_ppl] : x.buckets) s.x.push_back(mid_ppl.first), s.y.push_back(mid_ppl.second);
        else
          for (auto& [L, v] : x.by_length) s.x.push_back(static_cast<double>(L)), s.y.push_back(v);
        for (double v : s.y)
          if (std::isfinite(v) && v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
        if (s.x.empty()) continue;
        if (x.train_seq_len > 0) contexts.insert(x.train_seq_len);
        series.push_back(std::move(s));
      }
      if (series.empty()) continue;
      for (Panel& p : chunk_panels(data.size() > 1 ? "corpus " + corpus : "", series)) {
        if (std::isfinite(lo))
          for (int64_t T : contexts)  // the training-context marker: a vertical segment over the data range
            p.series.push_back({"training context " + length_label(T), {double(T), double(T)}, {lo * 0.95, hi * 1.05}});
        plot.panels.push_back(std::move(p));
      }
    }
    if (plot.panels.empty()) continue;
    if (plot.panels.size() > kMaxPanels) {
      ctx.md << "Only the first " << kMaxPanels << " of " << plot.panels.size() << " panels are drawn.\n\n";
      plot.panels.resize(kMaxPanels);
    }
    std::string on = data.size() == 1 ? " on " + data.begin()->first : "";
    ctx.add_figure(plot_lm(plot, ctx.figure_dir),
                   buckets ? "Perplexity per position bucket of the longest evaluation length" + on +
                                 ", one line per model"
                           : "Perplexity vs evaluation length" + on + " (log2 x), one line per model");
  }
  for (auto& [corpus, models] : data) {
    std::set<int64_t> lengths;
    for (auto& [label, x] : models)
      for (auto& [L, v] : x.by_length) lengths.insert(L);
    if (lengths.empty()) continue;
    std::vector<std::string> header{"model", "train context"};
    for (int64_t L : lengths) header.push_back("ppl @ " + length_label(L));
    std::vector<std::vector<std::string>> table;
    for (auto& [label, x] : models) {
      std::vector<std::string> row{label, x.train_seq_len > 0 ? length_label(x.train_seq_len) : "?"};
      for (int64_t L : lengths) row.push_back(x.by_length.count(L) ? ppl(x.by_length[L]) : "-");
      table.push_back(std::move(row));
    }
    ctx.md << "Perplexity by evaluation length on **" << corpus << "**:\n\n" << markdown_table(header, table) << "\n";
  }
}

// ---- The papers' numbers and the ranking comparison ----
void paper_comparison(ReportContext& ctx, const std::vector<LmRun>& runs, const std::vector<const LmRun*>& group) {
  std::set<std::string> ours;
  for (const LmRun& r : runs) ours.insert(r.family);
  BestMap best = best_per_size(group);
  auto params = size_params(group);
  bool heading = false;
  for (const LmPaperBlock& block : lm_paper_blocks()) {
    std::map<std::string, const LmPaperRow*> rows;  // family -> paper row
    for (const LmPaperRow& row : lm_paper_rows())
      if (block.id == std::string(row.block) && ours.count(row.family)) rows[row.family] = &row;
    if (rows.empty()) continue;
    if (!heading) {
      heading = true;
      ctx.md << "### The papers' language-modelling numbers (references)\n\n";
      ctx.md << "The papers' Wiki. ppl / LMB. ppl come from the zero-shot harness after pre-training at their "
                "budget; ours are validation perplexities after a far smaller training run. The numbers are "
                "**not comparable in absolute terms** (different corpus, tokenizer, and orders of magnitude fewer "
                "training tokens); only the **ranking** of the families can be compared (docs/reproducing.md#comparing-with-the-papers). "
                "Paper rows are copied from the papers' tables (docs/reproducing.md) and are references, never outputs; only "
                "families with LM runs here are listed.\n\n";
    }
    ctx.md << "**" << block.title << "** — source: " << block.source << ".\n\n";
    std::vector<std::vector<std::string>> paper_rows;
    for (auto& [family, row] : rows)
      paper_rows.push_back({family, row->row, row->wiki_ppl, row->lmb_ppl, row->source});
    ctx.md << markdown_table({"family", "paper's row", "Wiki. ppl (paper)", "LMB. ppl (paper)", "table"}, paper_rows)
           << "\n";

    // Our largest size at which at least two of these families have a final val ppl.
    std::vector<std::pair<double, std::string>> sizes;
    for (auto& [size, fams] : best) sizes.push_back({params.count(size) ? params[size] : 0.0, size});
    std::sort(sizes.rbegin(), sizes.rend());
    std::string chosen;
    for (auto& [p, size] : sizes) {
      int common = 0;
      for (auto& [family, r] : best[size]) common += rows.count(family) ? 1 : 0;
      if (common >= 2) {
        chosen = size;
        break;
      }
    }
    if (chosen.empty()) {
      ctx.md << "Fewer than two of these families have a final validation perplexity at one size in the "
                "compared group: no ranking.\n\n";
      continue;
    }
    std::vector<const LmRun*> compared;
    for (auto& [family, r] : best[chosen])
      if (rows.count(family)) compared.push_back(r);
    double pmin = INFINITY, pmax = 0, tmin = INFINITY, tmax = 0;
    for (const LmRun* r : compared) {
      if (std::isfinite(r->params)) pmin = std::min(pmin, r->params), pmax = std::max(pmax, r->params);
      if (std::isfinite(r->tokens)) tmin = std::min(tmin, r->tokens), tmax = std::max(tmax, r->tokens);
    }
    auto range = [](double lo, double hi) {
      if (!std::isfinite(lo)) return std::string("n/a");
      return lo == hi ? format_count(lo) : format_count(lo) + "–" + format_count(hi);
    };
    const LmRun& any = *compared.front();
    ctx.md << markdown_table({"budget", "params", "training tokens", "corpus", "tokenizer", "context"},
                             {{"papers", format_count(block.params), format_count(block.tokens), block.corpus,
                               block.tokenizer, length_label(block.context)},
                              {"ours (size " + chosen + ", runs " + id_list(compared) + ")", range(pmin, pmax),
                               range(tmin, tmax), any.corpus, any.tokenizer, length_label(any.seq_len)}})
           << "\n";
    if (std::isfinite(tmax) && tmax > 0)
      ctx.md << "Our runs saw about " << sci(block.tokens / tmax) << "× fewer training tokens than the papers'.\n\n";

    // Ranks (1 = lowest perplexity; ties share the lower rank).
    std::vector<double> paper_ppl, our_ppl;
    for (const LmRun* r : compared) {
      paper_ppl.push_back(std::strtod(rows[r->family]->wiki_ppl, nullptr));
      our_ppl.push_back(r->final_ppl);
    }
    auto rank = [](const std::vector<double>& v, size_t i) {
      int k = 1;
      for (double w : v) k += w < v[i] ? 1 : 0;
      return k;
    };
    std::vector<size_t> order(compared.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return paper_ppl[a] < paper_ppl[b]; });
    std::vector<std::vector<std::string>> rank_rows;
    for (size_t i : order) {
      const LmRun& r = *compared[i];
      rank_rows.push_back({r.family, std::to_string(rank(paper_ppl, i)), rows[r.family]->wiki_ppl,
                           std::to_string(rank(our_ppl, i)), ppl(our_ppl[i]) + " (#" + std::to_string(r.run.id) + ")"});
    }
    ctx.md << markdown_table({"family", "paper rank (Wiki. ppl ↓)", "paper Wiki. ppl", "our rank (val ppl ↓)",
                              "our final val ppl (run)"},
                             rank_rows)
           << "\n";
    double tau = kendall_tau_b(paper_ppl, our_ppl);
    ctx.md << "Kendall τ-b between the paper's ranking and ours (" << block.label << "): **"
           << format_number(tau, 3) << "** (n = " << compared.size()
           << " families, size " << chosen << "; +1 = same order, −1 = reversed).\n\n";
  }
}

void lm_section(ReportContext& ctx) {
  std::vector<LmRun> runs;
  for (const RunInfo& run : ctx.db.runs())
    if (run.task == "lm") runs.push_back(load_run(ctx, run));
  std::vector<EvalRow> evals;
  for (EvalRow& e : ctx.db.evals("lm_ppl"))
    if (e.task == "lm_ppl") evals.push_back(std::move(e));
  if (runs.empty() && evals.empty()) return;

  ctx.md << "## Language modelling\n\n";
  ctx.md << "Runs of task `lm` (docs/tasks.md#language-modelling): validation perplexity = exp(mean NLL per predicted token) over "
            "non-overlapping windows of the training context; bpb = bits per byte of the validation text. "
            "Training FLOPs as recorded by the trainer: "
         << kFlopsFormula << ".\n\n";
  if (!runs.empty()) runs_table(ctx, runs);

  // Scaling figures over the largest (corpus, tokenizer, context) group with perplexities.
  std::map<std::string, std::vector<const LmRun*>> groups;
  for (const LmRun& r : runs)
    if (std::isfinite(r.final_ppl)) groups[r.group].push_back(&r);
  std::string main_group;
  auto families = [](const std::vector<const LmRun*>& g) {
    std::set<std::string> f;
    for (const LmRun* r : g) f.insert(r->family);
    return f.size();
  };
  for (auto& [g, members] : groups)
    if (main_group.empty() || members.size() > groups[main_group].size() ||
        (members.size() == groups[main_group].size() && families(members) > families(groups[main_group])))
      main_group = g;
  if (!main_group.empty()) {
    ctx.md << "### Scaling\n\n";
    scaling_figures(ctx, groups[main_group], main_group);
    if (groups.size() > 1) {
      ctx.md << "Other (corpus, tokenizer, context) groups, not drawn above:";
      for (auto& [g, members] : groups)
        if (g != main_group) ctx.md << " " << g << " (" << members.size() << " runs: " << id_list(members) << ");";
      ctx.md << "\n\n";
    }
  }
  if (!runs.empty()) curve_figure(ctx, runs, groups.size() > 1);

  std::map<int64_t, const LmRun*> by_id;
  for (const LmRun& r : runs) by_id[r.run.id] = &r;
  extrapolation(ctx, evals, by_id);
  if (!main_group.empty()) paper_comparison(ctx, runs, groups[main_group]);
}

}  // namespace

void register_lm_section() { register_report_section("language_modelling", 25, lm_section); }

}  // namespace mnemo
