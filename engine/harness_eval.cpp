// The lm-eval-parity evaluation driver (engine/harness_eval.h). References: EleutherAI/lm-evaluation-harness
// lm_eval/evaluator.py (evaluate: requests per document, process_results, logged samples), lm_eval/api/task.py
// (Instance), lm_eval/models/huggingface.py (loglikelihood_rolling, generate_until), lm_eval/loggers/
// evaluation_tracker.py (samples file: sanitize_list, gen_args_i/arg_j), lm_eval/utils.py (make_table).
#include "engine/harness_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "core/system_info.h"
#include "engine/checkpoint.h"
#include "engine/evaluate.h"
#include "engine/model_adapter.h"
#include "engine/run_config.h"
#include "engine/safetensors.h"
#include "results/db.h"
#include "runtime/device.h"
#include "tasks/harness/aggregation.h"
#include "tasks/harness/request.h"
#include "tasks/lm_task.h"
#include "tasks/token_shard.h"

namespace mnemo {

namespace fs = std::filesystem;
using harness::Request;
using harness::RequestType;
using harness::Response;
using Log = std::function<void(const std::string&)>;

namespace {

std::string dump_line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Python str() of a response value, as lm-eval's sanitize_list writes resps: repr of floats, True/False.
std::string py_str(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return json(v).dump();  // shortest round-trip form with ".0"/"e-05" like Python's repr
}
std::string py_str(bool b) { return b ? "True" : "False"; }

// lm-eval keeps a YAML version (1.0) as a number, a class's VERSION = 0 as an integer; a string that is not a plain
// number stays a string ("default").
json version_value(const std::string& v) {
  char* end = nullptr;
  const long long i = std::strtoll(v.c_str(), &end, 10);
  if (!v.empty() && end && *end == '\0') return json(static_cast<int64_t>(i));
  const double d = std::strtod(v.c_str(), &end);
  return (!v.empty() && end && *end == '\0') ? json(d) : json(v);
}

struct Progress {
  std::string task;
  int64_t total = 0;
  double t0 = wall_seconds(), last = 0;
  Log log;
  void update(int64_t done, bool force = false) {
    const double now = wall_seconds();
    if (!log || (!force && now - last < 2.0)) return;
    last = now;
    const double rate = done / std::max(1e-9, now - t0);
    const double eta = rate > 0 ? (total - done) / rate : 0;
    log("[" + task + "] " + std::to_string(done) + "/" + std::to_string(total) + " requests (" +
        fixed(100.0 * done / std::max<int64_t>(1, total), 0) + "%), " + fixed(rate, 1) + " requests/s, ETA " +
        fixed(eta, 0) + " s");
  }
};

struct TaskWork {
  std::string name;
  std::unique_ptr<harness::HarnessTask> task;
  int64_t n_original = 0, n = 0, n_requests = 0, skipped = 0;  // skipped: documents without requests
  std::vector<std::vector<Request>> reqs;  // per document, in idx order (lm-eval sorts instances by idx)
};

void build_requests(TaskWork& w) {
  w.reqs.resize(static_cast<size_t>(w.n));
  for (int64_t d = 0; d < w.n; ++d) {
    auto r = w.task->requests(d);
    std::stable_sort(r.begin(), r.end(), [](const Request& a, const Request& b) { return a.idx < b.idx; });
    for (const auto& q : r) {
      const size_t want = q.type == RequestType::loglikelihood ? 2 : 1;
      if (q.arguments.size() != want)
        throw Error("task " + w.name + ": document " + std::to_string(d) + " has a " + harness::request_type_name(q.type) +
                    " request with " + std::to_string(q.arguments.size()) + " arguments (expected " +
                    std::to_string(want) + ")");
    }
    w.n_requests += static_cast<int64_t>(r.size());
    if (r.empty()) ++w.skipped;
    w.reqs[static_cast<size_t>(d)] = std::move(r);
  }
}

// lm-eval HFLM.generate_until for one request: context (BOS first with add_bos) left-truncated to
// max_length - max_gen_toks, greedy, cut at the first of `until` (each in turn, Python `s.split(term)[0]`).
std::string generate_until(EvalModel& model, const Tokenizer& tok, const Request& r, bool add_bos, int64_t max_length) {
  std::vector<int64_t> ids = tok.encode(r.arguments[0]);
  if (add_bos && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  const int64_t max_ctx = max_length - r.max_gen_toks;
  if (max_ctx < 1)
    throw Error("generate_until: max_gen_toks " + std::to_string(r.max_gen_toks) + " leaves no context within "
                "max_length " + std::to_string(max_length));
  if (static_cast<int64_t>(ids.size()) > max_ctx) ids.erase(ids.begin(), ids.end() - max_ctx);
  if (ids.empty()) ids.push_back(harness::prefix_token(tok));
  GenerationRequest g;
  g.max_new_tokens = r.max_gen_toks;
  if (tok.eos_id() >= 0) g.stop_ids = {tok.eos_id()};
  g.should_stop = [&](const std::vector<int64_t>& out) {
    const std::string text = tok.decode(out);
    for (const auto& u : r.until)
      if (!u.empty() && text.find(u) != std::string::npos) return true;
    return false;
  };
  std::string text = tok.decode(model.generate_greedy(ids, g));
  for (const auto& u : r.until)
    if (!u.empty()) text = text.substr(0, text.find(u));
  return text;
}

// " (3 skipped: the task's rule made no request for them)" or "".
std::string skipped_note(const TaskWork& w) {
  if (w.skipped == 0) return "";
  return " (" + std::to_string(w.skipped) + " skipped: the task's rule made no request for them)";
}

// Answers every request of a task: loglikelihood and rolling windows through loglikelihood_tokens (all of the
// task's windows in lm-eval's Collator order, sent in slices of whole batches so the batches equal one call's),
// generate_until one by one.
std::vector<std::vector<Response>> answer(EvalModel& model, const Tokenizer& tok, const TaskWork& w, bool add_bos,
                                          const HarnessOptions& o, const Log& log) {
  std::vector<std::vector<Response>> resp(w.reqs.size());
  std::vector<TokenPair> treq;
  std::vector<std::pair<size_t, size_t>> owner;  // token request -> (doc, request)
  std::vector<std::pair<size_t, size_t>> gens;
  std::optional<int64_t> prefix;  // only rolling requests need one (an Error for a tokenizer with neither BOS nor EOS)
  for (size_t d = 0; d < w.reqs.size(); ++d) {
    resp[d].resize(w.reqs[d].size());
    for (size_t i = 0; i < w.reqs[d].size(); ++i) {
      const Request& r = w.reqs[d][i];
      if (r.type == RequestType::loglikelihood) {
        treq.push_back(harness::encode_pair(tok, r.arguments[0], r.arguments[1], add_bos));
        owner.emplace_back(d, i);
        resp[d][i].is_greedy = true;
      } else if (r.type == RequestType::loglikelihood_rolling) {
        // spec §8.10: the page's tokens without special tokens; windows with one token of context.
        if (!prefix) prefix = harness::prefix_token(tok);
        for (auto& win : harness::rolling_windows(tok.encode(r.arguments[0]), *prefix, o.max_length, 1)) {
          treq.push_back(std::move(win));
          owner.emplace_back(d, i);
        }
      } else {
        gens.emplace_back(d, i);
      }
    }
  }
  Progress p{w.name, static_cast<int64_t>(treq.size() + gens.size())};
  p.log = log;
  if (log)
    log("[" + w.name + "] " + std::to_string(w.n) + " documents" + skipped_note(w) + ", " + std::to_string(w.n_requests) + " requests (" +
        std::to_string(treq.size()) + " scored sequences, " + std::to_string(gens.size()) + " generations), batch " +
        std::to_string(o.batch_size) + ", max_length " + std::to_string(o.max_length));
  const auto order = loglikelihood_order(treq);
  const size_t per_slice = static_cast<size_t>(o.batch_size) * static_cast<size_t>((64 + o.batch_size - 1) / o.batch_size);
  for (size_t s = 0; s < order.size(); s += per_slice) {
    const size_t e = std::min(order.size(), s + per_slice);
    std::vector<TokenPair> slice;
    slice.reserve(e - s);
    for (size_t k = s; k < e; ++k) slice.push_back(treq[order[k]]);
    const auto ans = model.loglikelihood_tokens(slice, o.batch_size, o.max_length);
    if (ans.size() != slice.size()) throw Error("loglikelihood_tokens returned a wrong number of answers");
    for (size_t k = s; k < e; ++k) {
      Response& r = resp[owner[order[k]].first][owner[order[k]].second];
      r.ll += ans[k - s].first;  // rolling: the document's ll is the sum over its windows
      r.is_greedy = r.is_greedy && ans[k - s].second;
    }
    p.update(static_cast<int64_t>(e), e == order.size() && gens.empty());
  }
  for (size_t g = 0; g < gens.size(); ++g) {
    const auto [d, i] = gens[g];
    resp[d][i].text = generate_until(model, tok, w.reqs[d][i], add_bos, o.max_length);
    p.update(static_cast<int64_t>(order.size() + g + 1), g + 1 == gens.size());
  }
  return resp;
}

// One line of samples_<task>.jsonl as lm-eval's EvaluationTracker writes it.
json sample_line(const harness::HarnessTask& t, int64_t doc_id, const json& doc, const std::vector<Request>& reqs,
                 const std::vector<Response>& resp, const json& metrics) {
  json args = json::object(), resps = json::array(), filtered = json::array();
  for (size_t i = 0; i < reqs.size(); ++i) {
    json a = json::object();
    for (size_t j = 0; j < reqs[i].arguments.size(); ++j) a["arg_" + std::to_string(j)] = reqs[i].arguments[j];
    json one;
    if (reqs[i].type == RequestType::generate_until) {
      a["arg_1"] = {{"until", reqs[i].until}, {"max_gen_toks", reqs[i].max_gen_toks}};
      one = resp[i].text;
    } else if (reqs[i].type == RequestType::loglikelihood) {
      one = json::array({py_str(resp[i].ll), py_str(resp[i].is_greedy)});
    } else {
      one = py_str(resp[i].ll);
    }
    args["gen_args_" + std::to_string(i)] = a;
    resps.push_back(json::array({one}));
    filtered.push_back(one);
  }
  const std::string target = t.target(doc);
  json names = json::array();
  for (auto it = metrics.begin(); it != metrics.end(); ++it) names.push_back(it.key());
  json s = {{"doc_id", doc_id},       {"doc", doc},           {"target", target},
            {"arguments", args},      {"resps", resps},       {"filtered_resps", filtered},
            {"filter", "none"},       {"metrics", names},
            {"doc_hash", sha256_hex(doc.dump(2, ' ', false, json::error_handler_t::replace))},
            {"prompt_hash", sha256_hex(reqs.empty() ? std::string() : reqs[0].arguments[0])},
            {"target_hash", sha256_hex(target)}};
  for (auto it = metrics.begin(); it != metrics.end(); ++it) s[it.key()] = it.value();
  return s;
}

void write_lines(const std::string& path, const std::vector<json>& lines) {
  std::string text;
  for (const auto& l : lines) text += dump_line(l) + "\n";
  write_file_atomic(path, text);
}

std::string center(const std::string& s, size_t w, size_t len) {
  const size_t pad = w > len ? w - len : 0;
  return std::string(pad / 2, ' ') + s + std::string(pad - pad / 2, ' ');
}

size_t display_width(const std::string& s) {  // code points (lm-eval's arrows are one column wide)
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string harness_results_table(const json& results, const std::vector<std::string>& order) {
  const std::vector<std::string> headers = {"Tasks", "Version", "Filter", "n-shot", "Metric", "", "Value", "", "Stderr"};
  const std::vector<bool> right = {false, true, false, true, false, false, true, false, true};
  std::vector<std::vector<std::string>> rows;
  const json& res = results.at("results");
  const json none = json::object();
  for (const auto& task : order) {
    if (!res.contains(task)) continue;
    const json& dic = res[task];
    const json& hib = results.value("higher_is_better", none).value(task, none);
    std::string k = dic.value("alias", task);
    const json ver = results.value("versions", none).value(task, json("    N/A"));
    std::string version = ver.is_string() ? ver.get<std::string>() : ver.dump();
    const json nshot = results.value("n-shot", none).value(task, json(" "));
    const std::string n = nshot.is_string() ? nshot.get<std::string>() : nshot.dump();
    for (auto it = dic.begin(); it != dic.end(); ++it) {  // keys in sorted order, as make_table's sorted()
      if (it.key() == "alias" || it.key() == "name" || it.key() == "sample_len" || it.key() == "sample_count") continue;
      const auto comma = it.key().find(',');
      const std::string m = it.key().substr(0, comma), f = comma == std::string::npos ? "" : it.key().substr(comma + 1);
      if (m.size() >= 7 && m.compare(m.size() - 7, 7, "_stderr") == 0) continue;
      const std::string arrow = hib.contains(m) ? (hib[m].get<bool>() ? "↑" : "↓") : "";
      const json& v = it.value();
      const std::string value = v.is_number_float() ? fixed(v.get<double>(), 4) : v.is_string() ? v.get<std::string>()
                                : v.is_null() ? "nan" : v.dump();
      const std::string se_key = m + "_stderr," + f;
      if (dic.contains(se_key)) {
        const json& se = dic[se_key];
        const std::string s = se.is_number() ? fixed(se.get<double>(), 4) : "   N/A";
        rows.push_back({k, version, f, n, m, arrow, value, "±", s});
      } else {
        rows.push_back({k, version, f, n, m, arrow, value, "", ""});
      }
      k.clear();
      version.clear();
    }
  }
  std::vector<size_t> width(headers.size(), 3);
  for (size_t c = 0; c < headers.size(); ++c) {
    width[c] = std::max(width[c], display_width(headers[c]));
    for (const auto& r : rows) width[c] = std::max(width[c], display_width(r[c]));
  }
  std::string out = "|";
  for (size_t c = 0; c < headers.size(); ++c) out += center(headers[c], width[c], display_width(headers[c])) + "|";
  out += "\n|";
  for (size_t c = 0; c < headers.size(); ++c) out += (right[c] ? std::string(width[c] - 1, '-') + ":" : std::string(width[c], '-')) + "|";
  out += "\n";
  for (const auto& r : rows) {
    out += "|";
    for (size_t c = 0; c < headers.size(); ++c) {
      const std::string pad(width[c] - display_width(r[c]), ' ');
      out += (right[c] ? pad + r[c] : r[c] + pad) + "|";
    }
    out += "\n";
  }
  return out;
}

json run_harness(EvalModel* model, const Tokenizer& tok, const HarnessOptions& o, std::function<void(const std::string&)> log) {
  if (o.tasks.empty()) throw Error("eval: no tasks given (--tasks piqa,arc_easy,... or a group such as commonsense)");
  if (o.limit && *o.limit <= 0)
    throw Error("eval: --limit must be a positive number of documents, got " + std::to_string(*o.limit));
  if (o.batch_size < 1) throw Error("eval: --batch-size must be >= 1, got " + std::to_string(o.batch_size));
  if (o.max_length < 1) throw Error("eval: --max-length must be >= 1, got " + std::to_string(o.max_length));
  if (o.output_path.empty()) throw Error("eval: the output path is empty (--output-path DIR)");
  if (!model && !o.requests_only) throw Error("eval: no model to evaluate (a checkpoint, or --requests-only)");
  if (o.cutting_context && (o.answer_length < 0 || o.context_length - o.answer_length < 1))
    throw Error("eval: --context-length (" + std::to_string(o.context_length) + ") must exceed --answer-length (" +
                std::to_string(o.answer_length) + " >= 0): the cut keeps context_length - answer_length tokens");
  if (model && tok.vocab_size() != model->vocab_size())
    throw Error("tokenizer " + tok.id() + " has " + std::to_string(tok.vocab_size()) +
                " tokens but the model's vocab_size is " + std::to_string(model->vocab_size()) +
                " (evaluate with the tokenizer the model was trained with: --tokenizer)");
  const bool add_bos = o.add_bos.value_or(tok.adds_bos());
  // Every task is built first, so that an unknown name fails before any work.
  std::vector<TaskWork> works;
  for (const auto& name : o.tasks) {
    TaskWork w;
    w.name = name;
    w.task = o.make_task ? o.make_task(name) : harness::make_harness_task(name);
    if (!w.task) throw Error("eval: unknown task '" + name + "'");
    works.push_back(std::move(w));
  }
  harness::HarnessTaskContext task_ctx;
  task_ctx.tokenizer = &tok;
  task_ctx.add_bos = add_bos;
  task_ctx.max_length = o.max_length;
  task_ctx.cutting_context = o.cutting_context;
  task_ctx.context_length = o.context_length;
  task_ctx.answer_length = o.answer_length;
  for (auto& w : works) w.task->configure(task_ctx);
  json skipped = json::object();
  fs::create_directories(o.output_path);
  json files = json::array();

  if (o.requests_only) {
    json counts = json::object();
    for (auto& w : works) {
      w.n_original = w.task->num_docs();
      w.n = o.limit ? std::min(*o.limit, w.n_original) : w.n_original;
      build_requests(w);
      std::vector<json> lines;
      for (int64_t d = 0; d < w.n; ++d) {
        if (w.reqs[static_cast<size_t>(d)].empty()) continue;  // skipped: no line, as the reference sends nothing
        json args = json::array();
        for (const auto& r : w.reqs[static_cast<size_t>(d)]) args.push_back(r.arguments);
        lines.push_back({{"doc_id", d}, {"arguments", args}});
      }
      const std::string path = (fs::path(o.output_path) / (w.name + ".jsonl")).string();
      write_lines(path, lines);
      files.push_back(path);
      counts[w.name] = w.n_requests;
      skipped[w.name] = w.skipped;
      if (log) log("[" + w.name + "] " + std::to_string(w.n_requests) + " requests of " + std::to_string(w.n) +
                   " documents" + skipped_note(w) + " -> " + path);
    }
    return {{"requests_only", true}, {"files", files}, {"requests", counts}, {"skipped", skipped},
            {"output_path", o.output_path}};
  }

  const double t_start = wall_seconds();
  const json sys = system_json();
  const json limit_json = o.limit ? json(*o.limit) : json(nullptr);
  json out = {{"results", json::object()},  {"group_subtasks", json::object()}, {"configs", json::object()},
              {"versions", json::object()}, {"n-shot", json::object()},         {"higher_is_better", json::object()},
              {"n-samples", json::object()}, {"data_files", json::object()}};
  out["config"] = {{"model", o.model_name},  {"model_args", "checkpoint=" + o.checkpoint},
                   {"checkpoint", o.checkpoint}, {"tokenizer", tok.id()}, {"add_bos", add_bos},
                   {"max_length", o.max_length}, {"limit", limit_json}, {"batch_size", o.batch_size},
                   {"bootstrap_iters", 100000}, {"device", o.device}, {"num_fewshot", 0},
                   {"cutting_context", o.cutting_context}, {"context_length", o.context_length},
                   {"answer_length", o.answer_length}};
  for (auto& w : works) {
    const double t0 = wall_seconds();
    w.n_original = w.task->num_docs();
    w.n = o.limit ? std::min(*o.limit, w.n_original) : w.n_original;
    build_requests(w);
    const auto resp = answer(*model, tok, w, add_bos, o, log);
    const auto specs = w.task->metrics();
    std::map<std::string, std::vector<json>> values;
    std::vector<json> samples;
    if (w.skipped == w.n)
      throw Error("task " + w.name + ": every one of its " + std::to_string(w.n) +
                  " documents was skipped (no requests): nothing to score");
    for (int64_t d = 0; d < w.n; ++d) {
      if (w.reqs[static_cast<size_t>(d)].empty()) continue;  // skipped
      const json doc = w.task->doc(d);
      const json m = w.task->process_results(doc, resp[static_cast<size_t>(d)]);
      if (!m.is_object()) throw Error("task " + w.name + ": process_results of document " + std::to_string(d) +
                                      " is not an object: " + dump_line(m));
      for (const auto& s : specs) {
        if (!m.contains(s.name))
          throw Error("task " + w.name + ": process_results of document " + std::to_string(d) + " has no '" +
                      s.name + "'");
        values[s.name].push_back(m[s.name]);
      }
      if (o.log_samples) samples.push_back(sample_line(*w.task, d, doc, w.reqs[static_cast<size_t>(d)],
                                                       resp[static_cast<size_t>(d)], m));
    }
    json res = {{"alias", w.name}}, hib = json::object(), metric_list = json::array();
    std::vector<EvalCell> cells;
    const double wall_s = wall_seconds() - t0;
    const json data_files = w.task->data_files();
    for (const auto& s : specs) {
      const auto& v = values[s.name];
      const double value = harness::aggregate(s.aggregation, v);
      // lm-eval (evaluator_utils.py calculate_aggregate_metric): a stderr only for more than one document.
      const double se = v.size() > 1 ? harness::aggregate_stderr(s.aggregation, v) : std::nan("");
      res[s.name + ",none"] = value;
      res[s.name + "_stderr,none"] = std::isfinite(se) ? json(se) : json("N/A");
      hib[s.name] = s.higher_is_better;
      metric_list.push_back({{"metric", s.name}, {"aggregation", s.aggregation}, {"higher_is_better", s.higher_is_better}});
      EvalCell c;
      c.task = w.name;
      c.metric = s.name;
      c.value = value;
      c.n = w.n - w.skipped;
      c.setting = {{"suite", "lm-eval"}, {"num_fewshot", 0}, {"limit", limit_json}, {"max_length", o.max_length},
                   {"add_bos", add_bos}, {"version", w.task->version()}};
      if (o.cutting_context)
        c.setting.update({{"cutting_context", true}, {"context_length", o.context_length},
                          {"answer_length", o.answer_length}});
      c.details = {{"stderr", std::isfinite(se) ? json(se) : json(nullptr)},
                   {"aggregation", s.aggregation},
                   {"higher_is_better", s.higher_is_better},
                   {"tokenizer", tok.id()},
                   {"data_files", data_files},
                   {"batch_size", o.batch_size},
                   {"wall_s", wall_s},
                   {"requests", w.n_requests},
                   {"docs_total", w.n_original},
                   {"docs_skipped", w.skipped},
                   {"mnemo_version", sys.value("mnemo", "")},
                   {"git_commit", git_commit()},
                   {"torch_version", torch_version()},
                   {"device", o.device},
                   {"output_path", o.output_path}};
      c.details.update(o.record_details);
      cells.push_back(std::move(c));
    }
    out["results"][w.name] = res;
    out["group_subtasks"][w.name] = json::array();
    out["configs"][w.name] = {{"task", w.name}, {"output_type", w.task->output_type()}, {"num_fewshot", 0},
                              {"metric_list", metric_list}, {"metadata", {{"version", version_value(w.task->version())}}}};
    out["versions"][w.name] = version_value(w.task->version());
    out["n-shot"][w.name] = 0;
    out["higher_is_better"][w.name] = hib;
    out["n-samples"][w.name] = {{"original", w.n_original}, {"effective", w.n}, {"skipped", w.skipped}};
    skipped[w.name] = w.skipped;
    out["data_files"][w.name] = data_files;
    if (o.log_samples) {
      const std::string path = (fs::path(o.output_path) / ("samples_" + w.name + ".jsonl")).string();
      write_lines(path, samples);
      files.push_back(path);
    }
    if (o.record) o.record(cells);
    if (log) {
      std::string line = "[" + w.name + "] done in " + fixed(wall_s, 1) + " s:";
      for (const auto& s : specs) line += " " + s.name + " " + fixed(res[s.name + ",none"].get<double>(), 4);
      log(line + skipped_note(w));
    }
  }
  out["git_hash"] = git_commit();
  out["date"] = static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch()).count()) / 1000.0;
  out["mnemo_version"] = sys.value("mnemo", "");
  out["torch_version"] = torch_version();
  out["total_evaluation_time_seconds"] = fixed(wall_seconds() - t_start, 3);
  const std::string results_path = (fs::path(o.output_path) / "results.json").string();
  write_file_atomic(results_path, out.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  files.insert(files.begin(), results_path);
  return {{"results", out}, {"table", harness_results_table(out, o.tasks)}, {"files", files}, {"skipped", skipped},
          {"output_path", o.output_path}};
}

std::string default_harness_output_path(const std::string& checkpoint) {
  if (checkpoint.empty()) return "out/eval/requests";
  fs::path p = fs::path(resolve_model_path(checkpoint)).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (p.extension() == ".safetensors" && p.has_parent_path()) {  // an export: RUN/export/model.safetensors -> RUN
    p = p.parent_path();
    if (p.filename() == "export" && p.has_parent_path()) p = p.parent_path();
  }
  if (p.filename().string().rfind("checkpoint", 0) == 0 && p.has_parent_path()) p = p.parent_path();
  fs::path name = p.filename();
  if (name.empty() || name == "." || name == "..") name = fs::absolute(p).lexically_normal().filename();
  return (fs::path("out") / "eval" / name).string();
}

namespace {
// The checkpoint's tokenizer: its config's `tokenizer` key (an `lm` run's corpus tokenizer "sp-bpe:N" is rebuilt
// or reused from the cache as training did), or `spec` when given.
std::shared_ptr<Tokenizer> checkpoint_tokenizer(const json& cfg, const std::string& spec, const std::string& ckpt,
                                                const Log& log) {
  if (!spec.empty()) return load_tokenizer(spec);
  if (!cfg.contains("tokenizer") || !cfg["tokenizer"].is_string())
    throw Error("checkpoint " + ckpt + " (task '" + cfg.value("task", "") +
                "') names no tokenizer in its config.json; give --tokenizer byte|FILE.model");
  const std::string s = cfg["tokenizer"].get<std::string>();
  if (is_corpus_tokenizer_spec(s)) return LmTask(task_params_of(resolve_run_config(cfg))).tokenizer(log);
  return load_tokenizer(s);
}
}  // namespace

json evaluate_harness(const HarnessEvalRequest& a, const std::function<void(const std::string&)>& log) {
  HarnessOptions o = a.options;
  o.tasks = harness::expand_harness_tasks(o.tasks);
  if (o.requests_only) {
    // Requests are strings before encoding: no model, and the tokenizer (--tokenizer, else byte) is not used.
    const auto tok = load_tokenizer(a.tokenizer.empty() ? "byte" : a.tokenizer);
    if (o.output_path.empty()) o.output_path = default_harness_output_path(a.checkpoint);
    if (a.max_length) o.max_length = *a.max_length;
    return run_harness(nullptr, *tok, o, log);
  }
  if (a.checkpoint.empty()) throw Error("eval --tasks: give --checkpoint DIR (or --requests-only to write the requests)");
  const std::string ckpt = resolve_model_path(a.checkpoint);  // a checkpoint folder or an export's .safetensors
  const json cfg = load_checkpoint_config(ckpt);
  const auto tok = checkpoint_tokenizer(cfg, a.tokenizer, ckpt, log);
  if (a.max_length) {
    o.max_length = *a.max_length;
  } else {
    o.max_length = cfg.contains("seq_len") && cfg["seq_len"].is_number_integer() ? cfg["seq_len"].get<int64_t>() : 2048;
  }
  if (o.output_path.empty()) o.output_path = default_harness_output_path(ckpt);
  const torch::Device device = resolve_device(a.device);
  LanguageModel model = load_model(ckpt, device);
  o.model_name = cfg.value("model", "");
  o.checkpoint = ckpt;
  o.device = device.str();
  ResultsDB db(a.db);
  const int64_t run_id = checkpoint_run_id(db, ckpt);
  o.record = eval_rows_sink(db, o.model_name, ckpt, run_id, a.keep_previous);
  try {
    o.record_details["config_hash"] = config_hash(resolve_run_config(cfg));
  } catch (const std::exception&) {  // a config this mnemo no longer resolves: the run id still ties the rows
  }
  LanguageModelAdapter adapter(*model, device);
  json out = run_harness(&adapter, *tok, o, log);
  out["run_id"] = run_id;
  return out;
}

}  // namespace mnemo
