// Zero-shot commonsense suite (docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext, docs/reproducing.md#comparing-with-the-papers): the `evals` rows of `mnemo eval --tasks`
// in the Titans-line columns, one row per evaluated model with its budget; then each paper's rows (zeroshot_papers.cpp)
// and ours in separate tables, the paper's average recomputed by its own rule, and the families' rankings compared by
// Kendall τ-b.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "reports/family_style.h"
#include "reports/rank_stats.h"
#include "reports/report.h"
#include "reports/zeroshot_papers.h"

namespace mnemo {

namespace {

struct Column {
  const char *key, *header, *task, *metric;
  bool accuracy, titans;  // titans: a column of the Titans line (Avg. = mean of its 8 accuracies)
};
const Column kColumns[] = {
    {"wiki_ppl", "Wiki. ppl ↓", "wikitext", "word_perplexity", false, true},
    {"lmb_ppl", "LMB. ppl ↓", "lambada_openai", "perplexity", false, true},
    {"lmb_acc", "LMB. acc", "lambada_openai", "acc", true, true},
    {"piqa", "PIQA acc", "piqa", "acc", true, true},
    {"hella", "Hella. acc_n", "hellaswag", "acc_norm", true, true},
    {"wino", "Wino. acc", "winogrande", "acc", true, true},
    {"arc_e", "ARC-e acc", "arc_easy", "acc", true, true},
    {"arc_c", "ARC-c acc_n", "arc_challenge", "acc_norm", true, true},
    {"siqa", "SIQA acc", "social_iqa", "acc", true, true},
    {"boolq", "BoolQ acc", "boolq", "acc", true, true},
    {"csqa", "CSQA acc", "commonsense_qa", "acc", true, false},
    {"obqa", "OBQA acc_n", "openbookqa", "acc_norm", true, false},
};
const std::set<std::string> kTasks = {"wikitext",   "lambada_openai", "piqa",       "hellaswag",
                                      "winogrande", "arc_easy",       "arc_challenge", "social_iqa",
                                      "boolq",      "openbookqa",     "commonsense_qa"};

const Column* column(const std::string& key) {
  for (const Column& c : kColumns)
    if (key == c.key) return &c;
  return nullptr;
}
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}
json parse_object(const std::string& text) {
  json j = json::parse(text.empty() ? "{}" : text, nullptr, false);
  return j.is_object() ? j : json::object();
}
std::string integer(double v) { return std::isfinite(v) ? std::to_string(static_cast<int64_t>(v)) : "?"; }
std::string pct(double v) { return format_number(v, 2); }

// ---- Our evaluations ----
struct Cell {
  double value = NAN, se = NAN;  // accuracies in %
  int64_t n = 0, eval_id = 0, limit = 0;  // limit > 0: `--limit` subsample
  std::vector<std::string> mismatches;    // data files that differ from lm-eval's copy: "file (note)"
};

struct ZsModel {
  std::string label, family, size_key = "?", corpus = "?", tokenizer = "?";
  int64_t run_id = 0, context = 0, last_eval = 0;
  double params = NAN, tokens = NAN;
  std::map<std::string, Cell> cells;  // column key -> cell
  std::set<std::string> settings;     // distinct evaluation settings

  // Mean of the accuracy columns `keys` present (in %) and how many were present.
  std::pair<double, int> mean(const std::vector<std::string>& keys) const {
    double sum = 0;
    int k = 0;
    for (const std::string& key : keys)
      if (auto it = cells.find(key); it != cells.end() && std::isfinite(it->second.value)) sum += it->second.value, ++k;
    return {k ? sum / k : NAN, k};
  }
  bool flagged(const std::vector<std::string>& keys) const {
    for (const std::string& key : keys)
      if (auto it = cells.find(key); it != cells.end() && (it->second.limit > 0 || !it->second.mismatches.empty()))
        return true;
    return false;
  }
};

std::vector<std::string> accuracy_keys(const std::string& columns) {
  std::vector<std::string> out;
  for (const std::string& k : split(columns, ' '))
    if (const Column* c = column(k); c && c->accuracy) out.push_back(k);
  return out;
}
const std::vector<std::string>& titans_accuracies() {
  static const std::vector<std::string> keys =
      accuracy_keys("wiki_ppl lmb_ppl lmb_acc piqa hella wino arc_e arc_c siqa boolq");
  return keys;
}

void init_model(ReportContext& ctx, ZsModel& m, const EvalRow& e, const std::map<int64_t, RunInfo>& runs) {
  m.run_id = e.run_id;
  auto it = runs.find(e.run_id);
  if (e.run_id <= 0 || it == runs.end()) {
    m.family = e.model;
    m.label = e.model + (e.run_id > 0 ? " (#" + std::to_string(e.run_id) + ")"
                                      : " @ " + std::filesystem::path(e.checkpoint).filename().string());
    return;
  }
  const RunInfo& run = it->second;
  json cfg = run_config(ctx.db, run);
  m.family = run_label(cfg, config_string(cfg, "model", run.model));
  std::string size = config_string(cfg, "size", "");
  auto layers = config_number(cfg, "n_layers"), d = config_number(cfg, "d_model");
  m.size_key = !size.empty() ? size : layers && d ? integer(*layers) + "×" + integer(*d) : "?";
  m.corpus = config_string(cfg, "corpus", "?");
  m.tokenizer = config_string(cfg, "tokenizer", "?");
  m.context = static_cast<int64_t>(config_number(cfg, "seq_len").value_or(0));
  m.params = run.n_params > 0 ? static_cast<double>(run.n_params) : NAN;
  double last_train = NAN;
  int64_t last_step = -1;
  for (const MetricRow& r : ctx.db.metrics(run.id)) {
    if (r.split == "summary" && r.name == "train_tokens") m.tokens = r.value;
    if (r.split == "train" && r.name == "tokens" && r.step > last_step) last_step = r.step, last_train = r.value;
  }
  if (!std::isfinite(m.tokens)) m.tokens = last_train;
  m.label = m.family + " " + m.size_key + " (#" + std::to_string(run.id) + ")";
}

Cell make_cell(const EvalRow& e, const Column& c, const json& setting) {
  Cell cell;
  double scale = c.accuracy ? 100.0 : 1.0;
  cell.value = e.value * scale;
  cell.n = e.n;
  cell.eval_id = e.id;
  cell.limit = static_cast<int64_t>(config_number(setting, "limit").value_or(0));
  json details = parse_object(e.details_json);
  cell.se = config_number(details, "stderr").value_or(NAN) * scale;
  if (details.contains("data_files") && details["data_files"].is_array())
    for (const json& f : details["data_files"])
      if (f.is_object() && f.value("matches_reference", true) == false) {
        std::string note = config_string(f, "note", "");
        cell.mismatches.push_back(config_string(f, "file", "?") + (note.empty() ? "" : " (" + note + ")"));
      }
  return cell;
}

std::vector<ZsModel> load_models(ReportContext& ctx, int& few_shot_rows) {
  std::map<int64_t, RunInfo> runs;
  for (RunInfo& r : ctx.db.runs()) runs[r.id] = r;
  std::map<std::string, ZsModel> models;  // run id or model @ checkpoint -> model
  for (const EvalRow& e : ctx.db.evals()) {
    if (!kTasks.count(e.task)) continue;
    json s = parse_object(e.setting_json);
    if (config_string(s, "suite", "lm-eval") != "lm-eval") continue;
    if (config_number(s, "num_fewshot").value_or(0) != 0) {
      ++few_shot_rows;
      continue;
    }
    const Column* c = nullptr;
    for (const Column& col : kColumns)
      if (e.task == col.task && e.metric == col.metric) c = &col;
    if (!c) continue;  // byte_perplexity, bits_per_byte, ...
    std::string key = e.run_id > 0 ? "#" + std::to_string(e.run_id) : e.model + "@" + e.checkpoint;
    bool fresh = !models.count(key);
    ZsModel& m = models[key];
    if (fresh) init_model(ctx, m, e, runs);
    json details = parse_object(e.details_json);
    if (m.tokenizer == "?") m.tokenizer = config_string(details, "tokenizer", "?");
    std::string set = "max_length " + integer(config_number(s, "max_length").value_or(NAN)) +
                      (s.value("add_bos", false) ? ", BOS added" : ", no BOS") + ", harness version " +
                      config_string(s, "version", "?");
    m.settings.insert(set);
    Cell cell = make_cell(e, *c, s);
    auto old = m.cells.find(c->key);  // a full-data row beats a `limit` row; else the latest
    if (old == m.cells.end() || (old->second.limit > 0 && cell.limit == 0) ||
        ((old->second.limit > 0) == (cell.limit > 0) && cell.eval_id > old->second.eval_id))
      m.cells[c->key] = cell;
    m.last_eval = std::max(m.last_eval, e.id);
  }
  std::vector<ZsModel> out;
  for (auto& [key, m] : models) out.push_back(std::move(m));
  std::sort(out.begin(), out.end(), [](const ZsModel& a, const ZsModel& b) {
    if (a.family != b.family) return a.family < b.family;
    double pa = std::isfinite(a.params) ? a.params : 0, pb = std::isfinite(b.params) ? b.params : 0;
    return pa != pb ? pa < pb : a.label < b.label;
  });
  return out;
}

std::string short_label(const ZsModel& m) { return m.run_id > 0 ? "#" + std::to_string(m.run_id) : m.label; }

std::string cell_text(const ZsModel& m, const std::string& key) {
  auto it = m.cells.find(key);
  if (it == m.cells.end()) return "-";
  const Cell& c = it->second;
  std::string s = pct(c.value) + (std::isfinite(c.se) ? " ± " + pct(c.se) : "");
  if (!c.mismatches.empty()) s += " ⚠ data";
  if (c.limit > 0) s += " ⚠ limit " + std::to_string(c.limit);
  return s;
}

// "⚠ data" / "⚠ limit" footnotes for every flagged cell.
void flag_notes(ReportContext& ctx, const std::vector<ZsModel>& models) {
  std::map<std::string, std::vector<std::string>> data, limited;  // "column: file" -> models
  for (const ZsModel& m : models)
    for (const auto& [key, cell] : m.cells) {
      std::string head = column(key)->header;
      for (const std::string& f : cell.mismatches) data[head + ": " + f].push_back(m.label);
      if (cell.limit > 0) limited[head + " (n = " + std::to_string(cell.n) + ")"].push_back(m.label);
    }
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (!data.empty()) {
    ctx.md << "⚠ data: the task's data file differs from lm-eval's copy, so the cell is **not comparable** with the "
              "papers' numbers (only with ours on the same file):\n\n";
    for (auto& [what, ms] : data) ctx.md << "- " << what << " — " << list(ms) << "\n";
    ctx.md << "\n";
  }
  if (!limited.empty()) {
    ctx.md << "⚠ limit N: only N documents of the task were scored (`--limit`), not the full split:\n\n";
    for (auto& [what, ms] : limited) ctx.md << "- " << what << " — " << list(ms) << "\n";
    ctx.md << "\n";
  }
}

void our_table(ReportContext& ctx, const std::vector<ZsModel>& models) {
  std::vector<const Column*> cols;
  for (const Column& c : kColumns) {
    bool any = c.titans;
    for (const ZsModel& m : models) any = any || m.cells.count(c.key);
    if (any) cols.push_back(&c);
  }
  std::vector<std::string> header{"model", "params", "training tokens", "corpus", "tokenizer", "context"};
  for (const Column* c : cols) {
    bool mismatch = false;
    for (const ZsModel& m : models)
      if (auto it = m.cells.find(c->key); it != m.cells.end()) mismatch = mismatch || !it->second.mismatches.empty();
    header.push_back(std::string(c->header) + (mismatch ? " ⚠" : ""));
  }
  header.push_back("Avg. (Titans rule)");
  std::vector<std::vector<std::string>> rows;
  for (const ZsModel& m : models) {
    std::vector<std::string> row{m.label, format_count(m.params), format_count(m.tokens), m.corpus, m.tokenizer,
                                 m.context > 0 ? std::to_string(m.context) : "?"};
    for (const Column* c : cols) row.push_back(cell_text(m, c->key));
    auto [avg, k] = m.mean(titans_accuracies());
    std::string a = k ? pct(avg) : "-";
    if (k && k < 8) a += " (" + std::to_string(k) + "/8)";
    if (k && m.flagged(titans_accuracies())) a += " ⚠";
    row.push_back(a);
    rows.push_back(std::move(row));
  }
  ctx.md << markdown_table(header, rows) << "\n";
  ctx.md << "Values: accuracies in % ± the standard error (lm-eval's mean_stderr), perplexities ± the bootstrap "
            "standard error. Avg. = the mean of the Titans line's 8 accuracy columns (LMB. acc … BoolQ; "
            "docs/reproducing.md#arithmetic-problems-in-the-papers-tables) over those present, (k/8) when fewer; ⚠ when it includes a flagged cell. Extra columns (CSQA, OBQA) "
            "are outside it.\n\n";
  flag_notes(ctx, models);
  std::map<std::string, std::vector<std::string>> settings;
  for (const ZsModel& m : models)
    for (const std::string& s : m.settings) settings[s].push_back(m.label);
  ctx.md << "Evaluation settings (zero-shot):";
  for (auto& [s, labels] : settings) {
    ctx.md << " " << s << " —";
    for (size_t i = 0; i < labels.size(); ++i) ctx.md << (i ? ", " : " ") << labels[i];
    ctx.md << ";";
  }
  ctx.md << "\n\n";
}

// ---- The papers' rows ----
// Where docs/reproducing.md lists a paper's arithmetic problems.
std::string problems(const ZsPaperBlock& b) {
  (void)b;  // one list for every paper, under the paper's name
  return "docs/reproducing.md#arithmetic-problems-in-the-papers-tables";
}
std::string block_name(const std::string& id) {
  if (id == "gdn") return "the Gated DeltaNet paper";
  const ZsPaperBlock* b = zs_paper_block(id);
  return b ? std::string(b->paper) + " " + b->table + ", " + b->block : id;
}

// One block: the paper's rows of our families, our models in the same columns, both budgets and the rankings.
void paper_block(ReportContext& ctx, const ZsPaperBlock& block, const std::vector<ZsModel>& models) {
  std::set<std::string> ours;
  for (const ZsModel& m : models) ours.insert(m.family);
  std::vector<const ZsPaperRow*> rows;
  std::map<std::string, const ZsPaperRow*> row_of;  // family -> paper row
  for (const ZsPaperRow& r : zs_paper_rows()) {
    if (block.id != std::string(r.block)) continue;
    bool shown = false;
    for (const std::string& f : split(r.families, ','))
      if (ours.count(f)) row_of[f] = &r, shown = true;
    if (shown) rows.push_back(&r);
  }
  if (rows.empty()) return;
  std::vector<std::string> cols = split(block.columns, ' ');
  std::vector<std::string> acc = accuracy_keys(block.columns);
  std::string rule = "mean of the " + std::to_string(acc.size()) + " accuracy columns";

  ctx.md << "#### " << block.paper << " " << block.table << ", " << block.block << "\n\n";
  ctx.md << "Source: " << block.section << " (copied as printed). Average rule: " << rule
         << (block.prints_avg ? "" : " (the paper prints none; recomputed)") << ".";
  if (block.note) ctx.md << " Note: " << block.note << ".";
  ctx.md << "\n\n";
  std::vector<std::string> header{"paper's row"};
  for (const std::string& k : cols) header.push_back(column(k)->header);
  if (block.prints_avg) header.push_back("Avg. (printed)");
  header.push_back("Avg. (recomputed)");
  header.push_back("copied from");
  header.push_back("mnemo family");
  std::vector<std::vector<std::string>> table;
  std::map<std::string, double> paper_avg;  // family -> recomputed
  std::vector<std::string> notes;
  for (const ZsPaperRow* r : rows) {
    ZsRecomputed rc = zs_recompute(*r);
    std::set<size_t> flagged(rc.cells.begin(), rc.cells.end());
    std::vector<std::string> line{r->model};
    for (size_t i = 0; i < cols.size(); ++i) line.push_back(std::string(r->cells[i]) + (flagged.count(i) ? " ⚠" : ""));
    if (block.prints_avg) line.push_back(std::string(r->avg) + (rc.avg_differs ? " ⚠" : ""));
    line.push_back(pct(rc.avg));
    line.push_back(r->copied_from ? block_name(r->copied_from) : "—");
    std::string fams;
    for (const std::string& f : split(r->families, ','))
      if (ours.count(f)) fams += (fams.empty() ? "" : ", ") + f, paper_avg[f] = rc.avg;
    line.push_back(fams);
    table.push_back(std::move(line));
    if (rc.avg_differs)
      notes.push_back("⚠ " + std::string(r->model) + ": printed Avg. " + r->avg + ", recomputed " + pct(rc.avg) + " (" +
                      problems(block) + ")");
    for (size_t i : flagged)
      notes.push_back("⚠ " + std::string(r->model) + ": " + column(cols[i])->header + " " + r->cells[i] + " where " +
                      block_name(r->copied_from) + " prints " + zs_paper_row(r->copied_from, r->model)->cells[i] +
                      " (" + problems(block) + ")");
    for (const ZsPaperNote& n : zs_paper_notes())
      if (block.id == std::string(n.block) && r->model == std::string(n.model))
        notes.push_back(std::string(r->model) + ": " + n.text);
  }
  ctx.md << markdown_table(header, table) << "\n";
  if (!notes.empty()) {
    for (const std::string& n : notes) ctx.md << "- " << n << "\n";
    ctx.md << "\n";
  }

  // Ours: per family of this block, one model of the size with the most complete families (ties: more params).
  std::map<std::string, std::map<std::string, const ZsModel*>> by_size;  // size -> family -> model
  std::map<std::string, double> size_params;
  for (const ZsModel& m : models) {
    if (!row_of.count(m.family)) continue;
    const ZsModel*& best = by_size[m.size_key][m.family];
    auto score = [&](const ZsModel* x) {
      auto [a, n] = x->mean(acc);
      return std::make_tuple(n == static_cast<int>(acc.size()), std::isfinite(a) ? a : -1.0, x->last_eval);
    };
    if (!best || score(&m) > score(best)) best = &m;
    if (std::isfinite(m.params)) size_params[m.size_key] = std::max(size_params[m.size_key], m.params);
  }
  std::string chosen;
  std::tuple<int, int, double> chosen_score{-1, -1, 0};
  for (auto& [size, fams] : by_size) {
    int complete = 0;
    for (auto& [f, m] : fams) complete += m->mean(acc).second == static_cast<int>(acc.size()) ? 1 : 0;
    std::tuple<int, int, double> s{complete, static_cast<int>(fams.size()), size_params[size]};
    if (s > chosen_score) chosen_score = s, chosen = size;
  }
  std::vector<const ZsModel*> picked;
  for (auto& [f, m] : by_size[chosen]) picked.push_back(m);
  std::vector<std::string> our_header{"ours (model)"};
  for (const std::string& k : cols) our_header.push_back(column(k)->header);
  our_header.push_back("Avg. (paper's rule)");
  std::vector<std::vector<std::string>> our_rows;
  for (const ZsModel* m : picked) {
    std::vector<std::string> line{m->label};
    for (const std::string& k : cols) line.push_back(cell_text(*m, k));
    auto [avg, k] = m->mean(acc);
    line.push_back(k == static_cast<int>(acc.size()) ? pct(avg) + (m->flagged(acc) ? " ⚠" : "")
                                                     : "incomplete (" + std::to_string(k) + "/" +
                                                           std::to_string(acc.size()) + ")");
    our_rows.push_back(std::move(line));
  }
  ctx.md << "Ours, in the paper's columns (size " << chosen << "; a separate table, not the paper's):\n\n"
         << markdown_table(our_header, our_rows) << "\n";
  bool any_flag = false;
  for (const ZsModel* m : picked) any_flag = any_flag || m->flagged(cols);
  if (any_flag) ctx.md << "⚠ data / ⚠ limit: as explained under our table above.\n\n";

  double pmin = INFINITY, pmax = 0, tmin = INFINITY, tmax = 0;
  std::set<std::string> corpora, tokenizers, contexts;
  for (const ZsModel* m : picked) {
    if (std::isfinite(m->params)) pmin = std::min(pmin, m->params), pmax = std::max(pmax, m->params);
    if (std::isfinite(m->tokens)) tmin = std::min(tmin, m->tokens), tmax = std::max(tmax, m->tokens);
    corpora.insert(m->corpus), tokenizers.insert(m->tokenizer);
    contexts.insert(m->context > 0 ? std::to_string(m->context) : "?");
  }
  auto range = [](double lo, double hi) {
    if (!std::isfinite(lo)) return std::string("n/a");
    return lo == hi ? format_count(lo) : format_count(lo) + "–" + format_count(hi);
  };
  auto join = [](const std::set<std::string>& s) {
    std::string out;
    for (const std::string& x : s) out += (out.empty() ? "" : ", ") + x;
    return out;
  };
  ctx.md << markdown_table({"budget", "params", "training tokens", "corpus", "tokenizer", "context"},
                           {{"paper", format_count(block.params), format_count(block.tokens), block.corpus,
                             block.tokenizer, block.context > 0 ? std::to_string(block.context) : "not stated"},
                            {"ours (size " + chosen + ")", range(pmin, pmax), range(tmin, tmax), join(corpora),
                             join(tokenizers), join(contexts)}})
         << "\n";
  if (std::isfinite(tmax) && tmax > 0)
    ctx.md << "Our models saw about " << format_count(block.tokens / tmax)
           << "× fewer training tokens than the paper's.\n\n";

  // Rankings (1 = highest average; ties share the better rank) over the families with both averages.
  std::vector<std::string> fams;
  std::vector<double> theirs, mine;
  std::vector<const ZsModel*> ranked;
  for (const ZsModel* m : picked) {
    auto [avg, k] = m->mean(acc);
    if (k != static_cast<int>(acc.size()) || !paper_avg.count(m->family)) continue;
    fams.push_back(m->family), theirs.push_back(paper_avg[m->family]), mine.push_back(avg), ranked.push_back(m);
  }
  if (fams.size() < 2) {
    ctx.md << "Fewer than two families have the paper's row and all " << acc.size()
           << " of our accuracy columns: no ranking.\n\n";
    return;
  }
  auto rank = [](const std::vector<double>& v, size_t i) {
    int r = 1;
    for (double w : v) r += w > v[i] ? 1 : 0;
    return r;
  };
  std::vector<size_t> order(fams.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return theirs[a] > theirs[b]; });
  std::vector<std::vector<std::string>> rank_rows;
  for (size_t i : order)
    rank_rows.push_back({fams[i], row_of[fams[i]]->model, std::to_string(rank(theirs, i)), pct(theirs[i]),
                         std::to_string(rank(mine, i)),
                         pct(mine[i]) + (ranked[i]->flagged(acc) ? " ⚠" : "") + " (" + short_label(*ranked[i]) + ")"});
  ctx.md << markdown_table({"family", "paper's row", "paper rank", "paper Avg. (recomputed)", "our rank",
                            "our Avg. (model)"},
                           rank_rows)
         << "\n";
  ctx.md << "Kendall τ-b between the paper's ranking and ours (" << block.paper << " " << block.table << ", "
         << block.block << "): **" << format_number(kendall_tau_b(theirs, mine), 3) << "** (n = " << fams.size()
         << " families; +1 = same order, −1 = reversed).\n\n";
}

void zeroshot_section(ReportContext& ctx) {
  int few_shot_rows = 0;
  std::vector<ZsModel> models = load_models(ctx, few_shot_rows);
  if (models.empty()) return;
  ctx.md << "## Zero-shot commonsense reasoning (lm-eval tasks)\n\n";
  ctx.md << "`mnemo eval --tasks` (docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext): zero-shot log-likelihood scoring at lm-evaluation-harness "
            "parity, one row per evaluated model, in the columns of the Titans line (Titans Table 1, Miras Table 2, "
            "Atlas). Each model's training budget is in its row.\n\n";
  if (few_shot_rows) ctx.md << few_shot_rows << " rows with num_fewshot > 0 are not shown.\n\n";
  our_table(ctx, models);

  bool heading = false;
  for (const ZsPaperBlock& block : zs_paper_blocks()) {
    bool any = false;
    for (const ZsPaperRow& r : zs_paper_rows())
      if (block.id == std::string(r.block))
        for (const std::string& f : split(r.families, ','))
          for (const ZsModel& m : models) any = any || m.family == f;
    if (!any) continue;
    if (!heading) {
      heading = true;
      ctx.md << "### The papers' zero-shot tables beside ours (references)\n\n";
      ctx.md << "Per paper and block: the paper's rows of the families evaluated here (copied from the papers' "
                "tables, docs/reproducing.md; references, never outputs), then ours in the same columns in a separate table, both "
                "budgets, and the two rankings of the families. Our models are far smaller and trained on far fewer "
                "tokens (other corpus and tokenizer): absolute values are **not comparable**, only the **ranking** "
                "is (docs/reproducing.md#comparing-with-the-papers). A paper's average is recomputed by its own rule and ranks by the recomputed "
                "value; ⚠ marks a printed value that disagrees (docs/reproducing.md#arithmetic-problems-in-the-papers-tables). Rows a paper copied from another "
                "name their source and are not independent evidence (docs/reproducing.md#rows-copied-between-papers).\n\n";
    }
    paper_block(ctx, block, models);
  }
  if (!heading) ctx.md << "None of the evaluated families appears in the papers' zero-shot tables.\n\n";
}

}  // namespace

void register_zeroshot_section() { register_report_section("zero_shot", 27, zeroshot_section); }

}  // namespace mnemo
