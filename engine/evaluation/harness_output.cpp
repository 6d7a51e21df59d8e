// What the lm-eval driver writes and reads back (engine/evaluation/harness_output.h). References: lm_eval/loggers/
// evaluation_tracker.py (samples: sanitize_list, gen_args_i/arg_j), lm_eval/evaluator_utils.py
// (calculate_aggregate_metric: a stderr only for more than one document), lm_eval/utils.py (make_table).
#include "engine/evaluation/harness_output.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/io/safetensors.h"
#include "tasks/harness/aggregation.h"

namespace mnemo {

using harness::Request;
using harness::RequestType;
using harness::Response;

namespace {

// Python str() of a response value, as lm-eval's sanitize_list writes resps: repr of floats, True/False.
std::string py_str(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return json(v).dump();  // shortest round-trip form with ".0"/"e-05" like Python's repr
}
std::string py_str(bool b) { return b ? "True" : "False"; }

// Python float(s) of a repr (what py_str wrote): "-1.25", "1e-05", "nan", "inf", "-inf".
bool parse_py_float(const std::string& s, double* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (!end || *end != '\0') return false;
  *out = v;
  return true;
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

std::string format_fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string dump_line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void write_lines(const std::string& path, const std::vector<json>& lines) {
  std::string text;
  for (const auto& l : lines) text += dump_line(l) + "\n";
  write_file_atomic(path, text);
}

std::vector<Request> document_requests(const harness::HarnessTask& task, int64_t doc_id) {
  auto r = task.requests(doc_id);
  std::stable_sort(r.begin(), r.end(), [](const Request& a, const Request& b) { return a.idx < b.idx; });
  for (const auto& q : r) {
    if (q.type == RequestType::token_predictions) {
      if (!q.arguments.empty() || q.input_ids.empty() || q.input_ids.size() != q.labels.size())
        throw Error("task " + task.name() + ": document " + std::to_string(doc_id) +
                    " has a token_predictions request with " + std::to_string(q.arguments.size()) + " strings, " +
                    std::to_string(q.input_ids.size()) + " input ids and " + std::to_string(q.labels.size()) +
                    " labels (expected no strings and as many labels as ids, at least one)");
      continue;
    }
    if (q.type == RequestType::token_logprobs) {
      if (!q.arguments.empty() || q.input_ids.size() < 2 || !q.labels.empty() || q.prefill_chunk < 0)
        throw Error("task " + task.name() + ": document " + std::to_string(doc_id) +
                    " has a token_logprobs request with " + std::to_string(q.arguments.size()) + " strings, " +
                    std::to_string(q.input_ids.size()) + " input ids, " + std::to_string(q.labels.size()) +
                    " labels and prefill_chunk " + std::to_string(q.prefill_chunk) +
                    " (expected no strings, at least two ids, no labels and prefill_chunk >= 0)");
      continue;
    }
    const size_t want = q.type == RequestType::loglikelihood ? 2 : 1;
    if (q.arguments.size() != want)
      throw Error("task " + task.name() + ": document " + std::to_string(doc_id) + " has a " +
                  harness::request_type_name(q.type) + " request with " + std::to_string(q.arguments.size()) +
                  " arguments (expected " + std::to_string(want) + ")");
  }
  return r;
}

json request_arguments(const std::vector<Request>& reqs) {
  json args = json::object();
  for (size_t i = 0; i < reqs.size(); ++i) {
    json a = json::object();
    for (size_t j = 0; j < reqs[i].arguments.size(); ++j) a["arg_" + std::to_string(j)] = reqs[i].arguments[j];
    if (reqs[i].type == RequestType::token_predictions) a = {{"arg_0", reqs[i].input_ids}, {"arg_1", reqs[i].labels}};
    if (reqs[i].type == RequestType::token_logprobs)
      a = {{"arg_0", reqs[i].input_ids}, {"arg_1", {{"prefill_chunk", reqs[i].prefill_chunk}}}};
    if (reqs[i].type == RequestType::generate_until)
      a["arg_1"] = {{"until", reqs[i].until}, {"max_gen_toks", reqs[i].max_gen_toks}};
    args["gen_args_" + std::to_string(i)] = a;
  }
  return args;
}

json sample_line(const harness::HarnessTask& t, int64_t doc_id, const json& doc, const std::vector<Request>& reqs,
                 const std::vector<Response>& resp, const json& metrics) {
  json resps = json::array(), filtered = json::array();
  for (size_t i = 0; i < reqs.size(); ++i) {
    json one;
    if (reqs[i].type == RequestType::generate_until) {
      one = resp[i].text;
    } else if (reqs[i].type == RequestType::token_predictions) {
      one = {{"predictions", resp[i].predictions}, {"loss_sum", resp[i].loss_sum}, {"n_labels", resp[i].n_labels}};
    } else if (reqs[i].type == RequestType::token_logprobs) {
      one = resp[i].logprobs;
    } else if (reqs[i].type == RequestType::loglikelihood) {
      one = json::array({py_str(resp[i].ll), py_str(resp[i].is_greedy)});
    } else {
      one = py_str(resp[i].ll);
    }
    resps.push_back(json::array({one}));
    filtered.push_back(one);
  }
  const std::string target = t.target(doc);
  // lm-eval hashes the first request's first argument; a token request's (token_predictions, token_logprobs) is its
  // input ids.
  const std::string prompt = reqs.empty() ? std::string()
                             : reqs[0].arguments.empty() ? json(reqs[0].input_ids).dump()
                                                         : reqs[0].arguments[0];
  json names = json::array();
  for (auto it = metrics.begin(); it != metrics.end(); ++it) names.push_back(it.key());
  json s = {{"doc_id", doc_id},       {"doc", doc},           {"target", target},
            {"arguments", request_arguments(reqs)}, {"resps", resps}, {"filtered_resps", filtered},
            {"filter", "none"},       {"metrics", names},
            {"doc_hash", sha256_hex(doc.dump(2, ' ', false, json::error_handler_t::replace))},
            {"prompt_hash", sha256_hex(prompt)},
            {"target_hash", sha256_hex(target)}};
  for (auto it = metrics.begin(); it != metrics.end(); ++it) s[it.key()] = it.value();
  return s;
}

std::vector<Response> responses_from_resps(const json& resps, const std::vector<Request>& reqs,
                                           const std::string& where) {
  if (!resps.is_array()) throw Error(where + ": field 'resps' is not an array (" + dump_line(resps).substr(0, 80) + ")");
  if (resps.size() != reqs.size())
    throw Error(where + ": field 'resps' holds " + std::to_string(resps.size()) + " responses; the task builds " +
                std::to_string(reqs.size()) + " requests for this document");
  std::vector<Response> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::string field = "field 'resps' [" + std::to_string(i) + "]";
    if (!resps[i].is_array() || resps[i].empty())
      throw Error(where + ": " + field + " is not a list holding the response (lm-eval's [[response], ...])");
    const json& one = resps[i][0];
    auto number = [&](const json& v, double* x) {
      if (v.is_number()) {
        *x = v.get<double>();
        return true;
      }
      return v.is_string() && parse_py_float(v.get<std::string>(), x);
    };
    switch (reqs[i].type) {
      case RequestType::generate_until:
        if (!one.is_string()) throw Error(where + ": " + field + " is not a generated string: " + dump_line(one));
        out[i].text = one.get<std::string>();
        break;
      case RequestType::loglikelihood:
        if (!one.is_array() || one.size() != 2 || !number(one[0], &out[i].ll) || !one[1].is_string() ||
            (one[1] != "True" && one[1] != "False"))
          throw Error(where + ": " + field + " is not a loglikelihood response [\"<float>\", \"True|False\"]: " +
                      dump_line(one));
        out[i].is_greedy = one[1] == "True";
        break;
      case RequestType::loglikelihood_rolling:
        if (!number(one, &out[i].ll))
          throw Error(where + ": " + field + " is not a loglikelihood_rolling response \"<float>\": " + dump_line(one));
        break;
      case RequestType::token_predictions: {
        const bool ok = one.is_object() && one.contains("predictions") && one["predictions"].is_array() &&
                        one.contains("loss_sum") && one["loss_sum"].is_number() && one.contains("n_labels") &&
                        one["n_labels"].is_number_integer();
        if (ok) {
          for (const auto& p : one["predictions"]) {
            if (!p.is_number_integer()) throw Error(where + ": " + field + " predictions hold a non-integer: " + dump_line(p));
            out[i].predictions.push_back(p.get<int64_t>());
          }
        }
        if (!ok || out[i].predictions.size() != reqs[i].labels.size())
          throw Error(where + ": " + field + " is not a token_predictions response {predictions (one per input id), "
                      "loss_sum, n_labels}: " + dump_line(one).substr(0, 120));
        out[i].loss_sum = one["loss_sum"].get<double>();
        out[i].n_labels = one["n_labels"].get<int64_t>();
        break;
      }
      case RequestType::token_logprobs: {
        bool ok = one.is_array() && one.size() + 1 == reqs[i].input_ids.size();
        for (size_t k = 0; ok && k < one.size(); ++k) {
          double x = 0;
          ok = number(one[k], &x);
          out[i].logprobs.push_back(x);
        }
        if (!ok)
          throw Error(where + ": " + field + " is not a token_logprobs response (one log-probability per input id "
                      "after the first, " + std::to_string(reqs[i].input_ids.size() - 1) + " of them): " +
                      dump_line(one).substr(0, 120));
        break;
      }
    }
  }
  return out;
}

std::vector<AggregatedMetric> aggregate_metrics(const std::vector<harness::MetricSpec>& specs,
                                                std::map<std::string, std::vector<json>>& values,
                                                const harness::HarnessTask& task) {
  std::vector<AggregatedMetric> out;
  for (const auto& s : specs) {
    const auto& v = values[s.name];
    AggregatedMetric m;
    m.spec = s;
    if (s.aggregation == harness::kCorpusAggregation) {  // the task's own, over every document at once
      m.value = task.aggregate_corpus(s.name, v);
      m.stderr_value = std::nan("");
      out.push_back(m);
      continue;
    }
    m.value = harness::aggregate(s.aggregation, v);
    // lm-eval (evaluator_utils.py calculate_aggregate_metric): a stderr only for more than one document.
    m.stderr_value = v.size() > 1 ? harness::aggregate_stderr(s.aggregation, v) : std::nan("");
    out.push_back(m);
  }
  return out;
}

json results_entry(const std::string& task, const std::vector<AggregatedMetric>& metrics) {
  json res = {{"alias", task}};
  for (const auto& m : metrics) {
    res[m.spec.name + ",none"] = m.value;
    res[m.spec.name + "_stderr,none"] = std::isfinite(m.stderr_value) ? json(m.stderr_value) : json("N/A");
  }
  return res;
}

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
      const std::string value = v.is_number_float() ? format_fixed(v.get<double>(), 4) : v.is_string() ? v.get<std::string>()
                                : v.is_null() ? "nan" : v.dump();
      const std::string se_key = m + "_stderr," + f;
      if (dic.contains(se_key)) {
        const json& se = dic[se_key];
        const std::string s = se.is_number() ? format_fixed(se.get<double>(), 4) : "   N/A";
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

}  // namespace mnemo
