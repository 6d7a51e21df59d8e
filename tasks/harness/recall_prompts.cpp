// The recall tasks' doc_to_text and truncate_context, rule for rule as HazyResearch/prefix-linear-attention writes
// them (lm-eval-harness/lm_eval/tasks/based_*/task.py, lm_eval/api/task.py Task.truncate_context). Python's string
// operations are reproduced over code points where the reference counts characters (slicing, len, lower()).
#include <algorithm>

#include "tasks/harness/py_compat.h"
#include "tasks/harness/qa_metrics.h"
#include "tasks/harness/recall_tasks.h"
#include "tasks/harness/task_common.h"

namespace mnemo::harness {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// str.strip(c) for one ASCII character.
std::string strip_char(const std::string& s, char c) {
  size_t b = 0, e = s.size();
  while (b < e && s[b] == c) ++b;
  while (e > b && s[e - 1] == c) --e;
  return s.substr(b, e - b);
}

// s[:-n] over code points (n >= 1).
std::string drop_last(const std::string& s, size_t n) {
  std::u32string u = py::decode_utf8(s);
  u.resize(u.size() >= n ? u.size() - n : 0);
  return py::encode_utf8(u);
}

// while s.lower().endswith(q.lower()): s = s[:-len(q)]. An empty q would loop forever in the reference (its first
// pass leaves ""); here that first pass is the last.
std::string drop_suffix_ignore_case(std::string s, const std::string& q) {
  if (q.empty()) return "";
  const std::u32string lq = py::lower(py::decode_utf8(q));
  while (true) {
    const std::u32string ls = py::lower(py::decode_utf8(s));
    if (ls.size() < lq.size() || ls.compare(ls.size() - lq.size(), lq.size(), lq) != 0) return s;
    s = drop_last(s, lq.size());
  }
}

// doc['key'][0].upper() + doc['key'][1:]
std::string upper_first(const std::string& key) {
  std::u32string u = py::decode_utf8(key);
  if (!u.empty()) u[0] = py::upper(u[0]);
  return py::encode_utf8(u);
}

std::string nonempty_key(const json& doc, const std::string& where) {
  const std::string key = require_string(doc, "key", where);
  if (key.empty()) throw Error(where + ": field 'key' is empty (the reference's doc_to_text takes its first character)");
  return key;
}

// re.sub(r"\[PAR\]|\[DOC\]|\[TLE\]", "", s)
std::string remove_markers(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 5, "[PAR]") == 0 || s.compare(i, 5, "[DOC]") == 0 || s.compare(i, 5, "[TLE]") == 0) {
      i += 5;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string fda(json& doc, bool twice, const std::string& where) {
  const std::string key = nonempty_key(doc, where);
  std::string text = drop_suffix_ignore_case(require_string(doc, "text", where), key + ":");
  const std::string question = upper_first(key) + ":";
  text = strip_char(strip_char(text, '\n'), '.');
  doc["text"] = text;
  std::string out = text;
  if (!ends_with(out, ".")) out += ".";
  if (!twice) return out + " " + question;
  return "Information about " + strip_char(question, ':') + ". " + out + "\n" + out + " " + question;
}

std::string swde(json& doc, bool twice, const std::string& where) {
  std::string text = require_string(doc, "text", where);
  text = text.substr(0, text.find(kSwdeMarker));  // while find(marker) >= 0: text = text.split(marker)[0]
  const std::string key = nonempty_key(doc, where);
  text = drop_suffix_ignore_case(text, key + ":");
  doc["text"] = text;
  const std::string question = upper_first(key) + ":";
  if (!twice) {
    return strip_char(py::strip(strip_char(py::strip(strip_char(text, '\n')), '\n')), '.') + ". " + question;
  }
  std::string out = py::strip(strip_char(py::strip(strip_char(strip_char(text, '\n'), '.')), '\n'));
  if (!ends_with(out, ".")) out += ".";
  return "Information about " + strip_char(question, ':') + ". " + out + "\n" + out + " " + question;
}

std::string squad(json& doc, bool twice, const std::string& where) {
  const std::string text = py::strip(require_string(doc, "text", where));
  if (!twice) return text;
  std::string context = require_string(doc, "context", where);
  context = context.substr(0, context.find("Question:"));  // context.split("Question:")[0]
  return require_string(doc, "question", where) + " " + context + "\n" + text;
}

// TriviaQA, NQ and DROP: the context loses the question at its end, then "<context>. <question>" (twice: the
// original question, then the context twice).
std::string qa(RecallKind kind, json& doc, bool twice, const std::string& where) {
  std::string context = py::strip(require_string(doc, "context", where));
  if (kind == RecallKind::triviaqa) context = remove_markers(context);
  const std::string question = py::strip(require_string(doc, "question", where));
  if (kind == RecallKind::nq && !twice) {
    // if context.endswith(question): context = context[:-len(question)]  (case-sensitive, once; "" empties it)
    if (question.empty()) context.clear();
    else if (ends_with(context, question)) context.resize(context.size() - question.size());
  } else {
    context = drop_suffix_ignore_case(context, question);
  }
  if (!twice) return strip_char(py::strip(context), '.') + ". " + question;
  std::string out = py::strip(strip_char(py::strip(context), '.')) + ".";
  out = out + "\n" + out + " " + question;
  const std::string orig = require_string(doc, "orig_question", where);
  return (kind == RecallKind::triviaqa ? orig : strip_char(orig, ':')) + " " + out;
}

}  // namespace

std::string recall_doc_to_text(RecallKind kind, bool twice, json& doc, const std::string& where) {
  switch (kind) {
    case RecallKind::fda: return fda(doc, twice, where);
    case RecallKind::swde: return swde(doc, twice, where);
    case RecallKind::squad: return squad(doc, twice, where);
    default: return qa(kind, doc, twice, where);
  }
}

RecallCutKeys recall_cut_keys(RecallKind kind) {
  switch (kind) {
    case RecallKind::fda:
    case RecallKind::swde: return {"text", {"key", "value"}};
    case RecallKind::squad: return {"text", {"value"}};
    case RecallKind::nq: return {"context", {"answers"}};
    default: return {"context", {}};
  }
}

std::optional<std::string> recall_cut_context(const json& doc, const RecallCutKeys& keys, const Tokenizer& tok,
                                              bool add_bos, int64_t context_length, int64_t answer_length,
                                              const std::string& where) {
  const int64_t desired = context_length - answer_length;  // the buffer for the answer
  if (desired < 1)
    throw Error("cutting context: --context-length " + std::to_string(context_length) + " minus --answer-length " +
                std::to_string(answer_length) + " leaves no tokens for the context");
  // batch_encode_plus([s]): the tokenizer's special tokens included.
  auto encode = [&](const std::string& s) {
    std::vector<int64_t> ids = tok.encode(s);
    if (add_bos && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
    return ids;
  };
  const std::string context = py::strip(require_string(doc, keys.context_key, where));
  const std::vector<int64_t> tokens = encode(context);
  const std::u32string ctx = py::decode_utf8(context);

  // The answer's character position: the earliest case-insensitive occurrence of any answer field.
  int64_t pos = -1;
  for (const auto& key : keys.answer_keys) {
    const json& v = require_field(doc, key, where);
    std::string answer;
    if (v.is_array()) {  // a list: its first element
      if (v.empty()) throw Error(where + ": field '" + key + "' is an empty list (the reference cuts at its first answer)");
      if (!v[0].is_string()) throw Error(where + ": field '" + key + "' has a non-string element " + json_excerpt(v[0]));
      answer = v[0].get<std::string>();
    } else {
      answer = require_string(doc, key, where);
    }
    if (py::len(answer) <= 1) return std::nullopt;  // `answer == "" or len(answer) <= 1`: skipped
    const int64_t p = find_ignore_case(ctx, py::decode_utf8(answer));
    if (p >= 0 && (pos == -1 || pos > p)) pos = p;
  }
  if (pos < 0 && doc.contains("alt_answers") && !doc["alt_answers"].is_null()) {
    const json& alts = doc["alt_answers"];
    if (!alts.is_array()) throw Error(where + ": field 'alt_answers' is not an array of strings");
    for (const auto& alt : alts) {
      if (!alt.is_string()) throw Error(where + ": field 'alt_answers' has a non-string element " + json_excerpt(alt));
      const int64_t p = find_ignore_case(ctx, py::decode_utf8(alt.get<std::string>()));
      if (p >= 0 && (pos == -1 || pos > p)) pos = p;
      if (pos >= 0) break;
    }
  }
  if (keys.answer_keys.empty()) pos = 0;

  // context[:answer_pos] (answer_pos = -1, not found: all but the last character), in tokens.
  const std::u32string before = pos >= 0 ? ctx.substr(0, static_cast<size_t>(pos)) : ctx.substr(0, ctx.empty() ? 0 : ctx.size() - 1);
  int64_t a = static_cast<int64_t>(encode(py::encode_utf8(before)).size());
  if (pos == -1 && doc.contains("tok_pos") && !doc["tok_pos"].is_null() && a > desired) a = require_int(doc, "tok_pos", where);

  const int64_t half = desired / 2;
  const int64_t start = std::max<int64_t>(0, a - half);
  const int64_t remaining = desired - (a - start);
  const int64_t end = std::min<int64_t>(static_cast<int64_t>(tokens.size()), a + remaining);
  // tokens[start:end] (start >= 0 and end >= 1 here; Python clamps both to the list)
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t s = std::min(start, n), e = std::clamp<int64_t>(end, 0, n);
  return tok.decode(e > s ? std::vector<int64_t>(tokens.begin() + s, tokens.begin() + e) : std::vector<int64_t>{});
}

}  // namespace mnemo::harness
