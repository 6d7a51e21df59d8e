// Hugging Face tokenizer.json read into the tokenizer's pipeline (see hf_tokenizer.h for what is read).
#include "tasks/hf_tokenizer_parts.h"

namespace mnemo {

using namespace hf_detail;  // the tokenizer's own parts (tasks/hf_tokenizer_parts.h)

void HfTokenizer::Impl::load(const json& doc) {
  if (!doc.is_object()) fail("", "expected a JSON object at the top level, got " + json_excerpt(doc));
  if (!doc.contains("model")) fail("", "field 'model' is missing (not a tokenizer.json file?)");
  load_model(doc["model"]);
  if (doc.contains("normalizer") && !doc["normalizer"].is_null()) load_normalizer(doc["normalizer"], "normalizer");
  if (doc.contains("pre_tokenizer") && !doc["pre_tokenizer"].is_null())
    load_pre_tokenizer(doc["pre_tokenizer"], "pre_tokenizer");
  for (size_t i = 0; i < pre_tokenizers.size(); ++i)
    if (pre_tokenizers[i].kind == PreTokenizer::kByteLevel) {
      if (i + 1 != pre_tokenizers.size())
        fail("pre_tokenizer", "a ByteLevel pre-tokenizer must come last (it maps bytes to the GPT-2 alphabet)");
      byte_level = true;
    }
  if (doc.contains("decoder") && !doc["decoder"].is_null()) {
    has_decoder = true;
    load_decoder(doc["decoder"], "decoder");
  }
  if (doc.contains("post_processor") && !doc["post_processor"].is_null())
    load_post_processor(doc["post_processor"], "post_processor");
  if (doc.contains("added_tokens") && !doc["added_tokens"].is_null()) load_added_tokens(doc["added_tokens"]);

  // Byte-level models start from the 256 byte characters; `bytes_vocab` lets ignore_merges look words up by bytes.
  byte_unit.fill(-1);
  if (byte_level) {
    for (int b = 0; b < 256; ++b) {
      auto it = vocab.find(byte_table().byte_to_char[b]);
      if (it != vocab.end()) byte_unit[b] = it->second;
    }
    std::string bytes;
    for (const auto& [tok, tid] : vocab)
      if (byte_level_bytes(tok, bytes)) bytes_vocab.emplace(bytes, tid);
  }
}

void HfTokenizer::Impl::load_model(const json& model) {
  const std::string where = "model";
  if (!model.is_object()) fail(where, "expected an object, got " + json_excerpt(model));
  std::string type = model.contains("type") ? type_of(model, where) : (model.contains("merges") ? "BPE" : "");
  if (type != "BPE") unsupported(type.empty() ? "(no type)" : type, "model.type", "BPE");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      fail(std::string("model.") + key, "is not supported (only null or \"\"), got " + json_excerpt(model[key]));
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0)
    fail("model.dropout", "BPE dropout is not supported (only null): encoding must be deterministic");
  byte_fallback = flag(model, "byte_fallback", where, false);
  fuse_unk = flag(model, "fuse_unk", where, false);
  ignore_merges = flag(model, "ignore_merges", where, false);

  const json& v = field(model, "vocab", where);
  if (!v.is_object()) fail("model.vocab", "expected an object {token: id}, got " + json_excerpt(v));
  int32_t max_id = -1;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > kMaxTokenId)
      fail("model.vocab." + it.key(),
           "expected an id in [0, " + std::to_string(kMaxTokenId) + "], got " + json_excerpt(it.value()));
    const auto tid = it.value().get<int32_t>();
    vocab.emplace(it.key(), tid);
    max_id = std::max(max_id, tid);
  }
  id_to_token.assign(max_id + 1, std::string());
  for (const auto& [tok, tid] : vocab) id_to_token[tid] = tok;

  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    const std::string unk = str(model, "unk_token", where);
    auto it = vocab.find(unk);
    if (it == vocab.end()) fail("model.unk_token", json(unk).dump() + " is not in model.vocab");
    unk_id = it->second;
  }
  byte_fallback_id.fill(-1);
  if (byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = vocab.find(name);
      if (it != vocab.end()) byte_fallback_id[b] = it->second;
    }
  }

  const json& m = field(model, "merges", where);
  if (!m.is_array()) fail("model.merges", "expected a list, got " + json_excerpt(m));
  merges.reserve(m.size() * 2);
  for (size_t i = 0; i < m.size(); ++i) {
    const json& e = m[i];
    const std::string at = "model.merges[" + std::to_string(i) + "]";
    std::string a, b;
    if (e.is_string()) {  // "a b" (older files)
      const std::string& s = e.get_ref<const json::string_t&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        fail(at, "expected \"a b\" (two tokens, one space), got " + json_excerpt(e));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail(at, "expected \"a b\" or [\"a\", \"b\"], got " + json_excerpt(e));
    }
    auto ia = vocab.find(a), ib = vocab.find(b), ic = vocab.find(a + b);
    if (ia == vocab.end()) fail(at, json(a).dump() + " is not in model.vocab");
    if (ib == vocab.end()) fail(at, json(b).dump() + " is not in model.vocab");
    if (ic == vocab.end()) fail(at, "the merged token " + json(a + b).dump() + " is not in model.vocab");
    merges[pair_key(ia->second, ib->second)] = Merge{static_cast<int32_t>(i), ic->second};
  }
}

void HfTokenizer::Impl::load_normalizer(const json& n, const std::string& where) {
  const std::string type = type_of(n, where);
  if (type == "Sequence") {
    const json& list = field(n, "normalizers", where);
    if (!list.is_array()) fail(where + ".normalizers", "expected a list, got " + json_excerpt(list));
    for (size_t i = 0; i < list.size(); ++i)
      load_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]");
  } else if (type == "NFC") {
    normalizers.push_back({Normalizer::kNfc, "", ""});
  } else if (type == "NFKC") {
    normalizers.push_back({Normalizer::kNfkc, "", ""});
  } else if (type == "Prepend") {
    normalizers.push_back({Normalizer::kPrepend, str(n, "prepend", where), ""});
  } else if (type == "Replace") {
    const json& pat = field(n, "pattern", where);
    if (!pat.is_object() || !pat.contains("String") || !pat["String"].is_string())
      fail(where + ".pattern", "only a {\"String\": ...} pattern is supported, got " + json_excerpt(pat));
    normalizers.push_back({Normalizer::kReplace, pat["String"].get<std::string>(), str(n, "content", where)});
  } else {
    unsupported(type, where, "normalizers NFC, NFKC, Prepend, Replace, Sequence");
  }
}

void HfTokenizer::Impl::load_pre_tokenizer(const json& p, const std::string& where) {
  const std::string type = type_of(p, where);
  PreTokenizer t;
  if (type == "Sequence") {
    const json& list = field(p, "pretokenizers", where);
    if (!list.is_array()) fail(where + ".pretokenizers", "expected a list, got " + json_excerpt(list));
    for (size_t i = 0; i < list.size(); ++i)
      load_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]");
    return;
  } else if (type == "ByteLevel") {
    t.kind = PreTokenizer::kByteLevel;
    t.add_prefix_space = flag(p, "add_prefix_space", where, true);
    if (flag(p, "use_regex", where, true)) t.regex = std::make_shared<Regex>(kGpt2Pattern, path + ": " + where);
  } else if (type == "Split") {
    t.kind = PreTokenizer::kSplit;
    const json& pat = field(p, "pattern", where);
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string())
      t.regex = std::make_shared<Regex>(pat["Regex"].get<std::string>(), path + ": " + where + ".pattern");
    else if (pat.is_object() && pat.contains("String") && pat["String"].is_string())
      t.regex = std::make_shared<Regex>(regex_quote(pat["String"].get<std::string>()),
                                        path + ": " + where + ".pattern");
    else
      fail(where + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}, got " + json_excerpt(pat));
    const std::string behavior = str(p, "behavior", where);
    if (behavior == "Removed")
      t.remove_matches = true;
    else if (behavior != "Isolated")
      unsupported("Split(behavior=" + behavior + ")", where + ".behavior", "Split behaviors Isolated, Removed");
    t.invert = flag(p, "invert", where, false);
  } else if (type == "Metaspace") {
    t.kind = PreTokenizer::kMetaspace;
    t.replacement = str(p, "replacement", where);
    if (t.replacement.empty()) fail(where + ".replacement", "is empty");
    t.split = flag(p, "split", where, true);
    std::string scheme = "always";
    if (p.contains("prepend_scheme")) scheme = str(p, "prepend_scheme", where);
    else if (p.contains("add_prefix_space")) scheme = flag(p, "add_prefix_space", where, true) ? "always" : "never";
    if (scheme == "always") t.prepend = PreTokenizer::kAlways;
    else if (scheme == "first") t.prepend = PreTokenizer::kFirst;
    else if (scheme == "never") t.prepend = PreTokenizer::kNever;
    else fail(where + ".prepend_scheme", "expected always, first or never, got " + json(scheme).dump());
  } else {
    unsupported(type, where, "pre-tokenizers ByteLevel, Split, Metaspace, Sequence");
  }
  pre_tokenizers.push_back(std::move(t));
}

void HfTokenizer::Impl::load_decoder(const json& d, const std::string& where) {
  const std::string type = type_of(d, where);
  Decoder t;
  if (type == "Sequence") {
    const json& list = field(d, "decoders", where);
    if (!list.is_array()) fail(where + ".decoders", "expected a list, got " + json_excerpt(list));
    for (size_t i = 0; i < list.size(); ++i) load_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]");
    return;
  } else if (type == "ByteLevel") {
    t.kind = Decoder::kByteLevel;
  } else if (type == "Replace") {
    t.kind = Decoder::kReplace;
    const json& pat = field(d, "pattern", where);
    if (!pat.is_object() || !pat.contains("String") || !pat["String"].is_string())
      fail(where + ".pattern", "only a {\"String\": ...} pattern is supported, got " + json_excerpt(pat));
    t.a = pat["String"].get<std::string>();
    t.b = str(d, "content", where);
  } else if (type == "ByteFallback") {
    t.kind = Decoder::kByteFallback;
  } else if (type == "Fuse") {
    t.kind = Decoder::kFuse;
  } else if (type == "Strip") {
    t.kind = Decoder::kStrip;
    t.a = str(d, "content", where);
    size_t i = 0;
    if (t.a.empty() || !valid_utf8(t.a) || (next_codepoint(t.a, i), i != t.a.size()))
      fail(where + ".content", "expected one character, got " + json(t.a).dump());
    for (const char* key : {"start", "stop"}) {
      const json& n = field(d, key, where);
      if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > 1000000)
        fail(where + "." + key, "expected a count, got " + json_excerpt(n));
      (std::string(key) == "start" ? t.start : t.stop) = n.get<int>();
    }
  } else if (type == "Metaspace") {
    t.kind = Decoder::kMetaspace;
    t.a = str(d, "replacement", where);
    std::string scheme = d.contains("prepend_scheme") ? str(d, "prepend_scheme", where) : "always";
    if (!d.contains("prepend_scheme") && d.contains("add_prefix_space"))
      scheme = flag(d, "add_prefix_space", where, true) ? "always" : "never";
    t.prepend = scheme != "never";
  } else {
    unsupported(type, where, "decoders ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence");
  }
  decoders.push_back(std::move(t));
}

void HfTokenizer::Impl::load_post_processor(const json& p, const std::string& where) {
  const std::string type = type_of(p, where);
  if (type == "Sequence") {
    const json& list = field(p, "processors", where);
    if (!list.is_array()) fail(where + ".processors", "expected a list, got " + json_excerpt(list));
    for (size_t i = 0; i < list.size(); ++i)
      load_post_processor(list[i], where + ".processors[" + std::to_string(i) + "]");
  } else if (type == "TemplateProcessing") {
    // BOS = the special token placed before the sequence in the single-sequence template.
    const json& single = field(p, "single", where);
    if (!single.is_array() || single.empty()) fail(where + ".single", "expected a non-empty list");
    const json& first = single[0];
    if (first.is_object() && first.contains("SpecialToken")) {
      const std::string name = str(first["SpecialToken"], "id", where + ".single[0].SpecialToken");
      const json& specials = field(p, "special_tokens", where);
      if (!specials.is_object() || !specials.contains(name))
        fail(where + ".special_tokens", json(name).dump() + " is not listed");
      const json& ids = field(specials[name], "ids", where + ".special_tokens." + name);
      if (!ids.is_array() || ids.size() != 1 || !ids[0].is_number_integer())
        fail(where + ".special_tokens." + name + ".ids", "expected one id, got " + json_excerpt(ids));
      bos = ids[0].get<int64_t>();
    }
  } else if (type != "ByteLevel") {
    unsupported(type, where, "post-processors ByteLevel, TemplateProcessing, Sequence");
  }
}

void HfTokenizer::Impl::load_added_tokens(const json& list) {
  if (!list.is_array()) fail("added_tokens", "expected a list, got " + json_excerpt(list));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const json& t = list[i];
    const json& tid = field(t, "id", where);
    if (!tid.is_number_integer() || tid.get<int64_t>() < 0 || tid.get<int64_t>() > kMaxTokenId)
      fail(where + ".id", "expected an id in [0, " + std::to_string(kMaxTokenId) + "], got " + json_excerpt(tid));
    if (flag(t, "single_word", where, false)) fail(where + ".single_word", "true is not supported");
    AddedToken a{str(t, "content", where), tid.get<int32_t>(), flag(t, "special", where, false),
                 flag(t, "normalized", where, false), flag(t, "lstrip", where, false), flag(t, "rstrip", where, false)};
    if (a.content.empty()) fail(where + ".content", "is empty");
    if (!valid_utf8(a.content)) fail(where + ".content", "is not valid UTF-8");
    added.push_back(a);
    const AddedToken* p = &added.back();
    added_by_id[a.id] = p;
    // With no normalizer, "normalized" tokens are matched on the same text as the others.
    (a.normalized && !normalizers.empty() ? normalized_matcher : raw_matcher).add(p);
    if (static_cast<size_t>(a.id) >= id_to_token.size()) id_to_token.resize(a.id + 1);
    id_to_token[a.id] = a.content;
  }
  raw_matcher.finish();
  normalized_matcher.finish();
}

void HfTokenizer::Impl::pick_specials(const fs::path& folder) {
  vocab_n = static_cast<int64_t>(id_to_token.size());
  auto lookup = [&](const std::string& name) -> int64_t {
    for (const auto& a : added)
      if (a.content == name) return a.id;
    auto it = vocab.find(name);
    return it == vocab.end() ? -1 : it->second;
  };
  const fs::path config = folder / "tokenizer_config.json";
  json cfg;
  if (fs::exists(config)) cfg = read_json_file(config.string());
  auto from_config = [&](const char* key) -> int64_t {
    if (!cfg.is_object() || !cfg.contains(key)) return -1;
    const json& v = cfg[key];
    std::string name;
    if (v.is_string()) name = v.get<std::string>();
    else if (v.is_object() && v.contains("content") && v["content"].is_string()) name = v["content"].get<std::string>();
    else return -1;
    return lookup(name);
  };
  eos = from_config("eos_token");
  for (const char* name : {"</s>", "<|end_of_text|>", "<|endoftext|>"})
    if (eos < 0) eos = lookup(name);
  pad = from_config("pad_token");
  if (pad < 0) pad = lookup("<pad>");
}

HfTokenizer::HfTokenizer(const std::string& path_in) : impl_(std::make_unique<Impl>()) {
  fs::path path = path_in;
  if (fs::is_directory(path)) {
    path /= "tokenizer.json";
    if (!fs::exists(path)) throw Error(path_in + ": the folder holds no tokenizer.json");
  }
  impl_->path = path.string();
  const std::string text = read_text_file(impl_->path);
  impl_->load(parse_json_text(text, impl_->path));
  impl_->pick_specials(path.parent_path());
  const std::string name = path.filename() == "tokenizer.json" && !path.parent_path().filename().empty()
                               ? (path.parent_path().filename() / path.filename()).string()
                               : path.filename().string();
  impl_->id = "hf:" + name + ":" + sha256_hex(text).substr(0, 12);
}

HfTokenizer::~HfTokenizer() = default;

bool is_hf_tokenizer_path(const std::string& path) {
  const fs::path p = path;
  if (fs::is_directory(p)) return fs::exists(p / "tokenizer.json");
  return p.extension() == ".json";
}

}  // namespace mnemo
