// Hugging Face tokenizer: text to ids (normalize, added tokens, pre-tokenize, BPE) and ids back to text.
#include "tasks/hf_tokenizer_parts.h"

namespace mnemo {

using namespace hf_detail;  // the tokenizer's own parts (tasks/hf_tokenizer_parts.h)

std::string HfTokenizer::Impl::normalize(std::string_view text) const {
  std::string s(text);
  for (const Normalizer& n : normalizers) {
    switch (n.kind) {
      case Normalizer::kNfc:
      case Normalizer::kNfkc: {
        if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) break;
        utf8proc_uint8_t* out = nullptr;
        const int options = UTF8PROC_STABLE | UTF8PROC_COMPOSE | (n.kind == Normalizer::kNfkc ? UTF8PROC_COMPAT : 0);
        const utf8proc_ssize_t len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                                  static_cast<utf8proc_ssize_t>(s.size()), &out,
                                                  static_cast<utf8proc_option_t>(options));
        if (len < 0) throw Error(path + ": normalizer: " + utf8proc_errmsg(len));
        s.assign(reinterpret_cast<char*>(out), static_cast<size_t>(len));
        std::free(out);
        break;
      }
      case Normalizer::kPrepend:
        if (!s.empty()) s.insert(0, n.a);
        break;
      case Normalizer::kReplace:
        replace_every(s, n.a, n.b);
        break;
    }
  }
  return s;
}

// One stretch of text between added tokens: normalize, match normalized added tokens, pre-tokenize, BPE.
void HfTokenizer::Impl::encode_segment(std::string_view text, bool at_start, std::vector<int64_t>& out) const {
  std::string normalized;
  if (!normalizers.empty()) {
    normalized = normalize(text);
    text = normalized;
  }
  std::deque<std::string> store;  // text rewritten by Metaspace (stable addresses for the views)
  std::vector<Piece> pieces, next;
  auto run = [&](std::string_view seg, bool start) {
    pieces.assign(1, Piece{seg, start});
    for (const PreTokenizer& p : pre_tokenizers) {
      next.clear();
      for (const Piece& piece : pieces) {
        switch (p.kind) {
          case PreTokenizer::kByteLevel: {
            std::string_view t = piece.text;
            if (p.add_prefix_space && !t.empty() && t[0] != ' ') {
              store.push_back(" " + std::string(t));
              t = store.back();
            }
            if (!p.regex) {
              next.push_back({t, piece.at_start});
              break;
            }
            size_t prev = 0;
            p.regex->for_each_match(t, [&](size_t b, size_t e) {
              if (b > prev) next.push_back({t.substr(prev, b - prev), piece.at_start && prev == 0});
              next.push_back({t.substr(b, e - b), piece.at_start && b == 0});
              prev = e;
            });
            if (prev < t.size()) next.push_back({t.substr(prev), piece.at_start && prev == 0});
            break;
          }
          case PreTokenizer::kSplit: {
            std::string_view t = piece.text;
            size_t prev = 0;
            // keep(match?) under invert: Removed drops what the (possibly inverted) pattern marks.
            auto emit = [&](size_t b, size_t e, bool is_match) {
              if (p.invert) is_match = !is_match;
              if (p.remove_matches && is_match) return;
              next.push_back({t.substr(b, e - b), piece.at_start && b == 0});
            };
            p.regex->for_each_match(t, [&](size_t b, size_t e) {
              if (b > prev) emit(prev, b, false);
              emit(b, e, true);
              prev = e;
            });
            if (prev < t.size()) emit(prev, t.size(), false);
            break;
          }
          case PreTokenizer::kMetaspace: {
            std::string s(piece.text);
            replace_every(s, " ", p.replacement);
            const bool prepend =
                p.prepend == PreTokenizer::kAlways || (p.prepend == PreTokenizer::kFirst && piece.at_start);
            if (prepend && s.compare(0, p.replacement.size(), p.replacement) != 0) s.insert(0, p.replacement);
            store.push_back(std::move(s));
            std::string_view t = store.back();
            if (!p.split) {
              next.push_back({t, piece.at_start});
              break;
            }
            // split before every replacement character (MergedWithNext)
            size_t b = 0;
            for (size_t hit = t.find(p.replacement, 1); hit != std::string_view::npos;
                 hit = t.find(p.replacement, hit + p.replacement.size())) {
              next.push_back({t.substr(b, hit - b), piece.at_start && b == 0});
              b = hit;
            }
            next.push_back({t.substr(b), piece.at_start && b == 0});
            break;
          }
        }
      }
      pieces.swap(next);
    }
    for (const Piece& piece : pieces)
      if (!piece.text.empty()) encode_piece(piece.text, out);
  };
  if (normalized_matcher.empty()) {
    run(text, at_start);
  } else {
    normalized_matcher.split(text, [&](std::string_view seg, int32_t tid, size_t offset) {
      if (tid >= 0) out.push_back(tid);
      else run(seg, at_start && offset == 0);
    });
  }
}

void HfTokenizer::Impl::encode_piece(std::string_view piece, std::vector<int64_t>& out) const {
  const bool cacheable = piece.size() <= kCacheMaxLen;
  if (cacheable) {
    std::shared_lock<std::shared_mutex> lock(cache_mutex);
    auto it = cache.find(std::string(piece));
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  ids.clear();
  bpe(piece, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock<std::shared_mutex> lock(cache_mutex, std::try_to_lock);
    if (lock.owns_lock() && cache.size() < kCacheEntries) cache.emplace(std::string(piece), ids);
  }
}

// BPE over one pre-token (the library's Word::merge_all): start from its units (bytes of a byte-level model,
// else characters, with <0xNN> byte fallback or <unk>), then repeatedly merge the adjacent pair of lowest rank,
// the leftmost one on ties, until no pair has a merge.
void HfTokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& ids) const {
  if (ignore_merges) {  // a word that is itself a token is that token
    const auto& table = byte_level ? bytes_vocab : vocab;
    auto it = table.find(std::string(word));
    if (it != table.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id, prev, next;
    bool alive;
  };
  thread_local std::vector<Symbol> sym;
  sym.clear();
  thread_local std::string key;
  int32_t pending_unk = -1;  // fuse_unk: consecutive unknown units become one <unk>
  auto push = [&](int32_t tid) {
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({tid, n - 1, n + 1, true});
  };
  auto unknown = [&](std::string_view unit) {
    if (byte_fallback) {
      bool all = true;
      for (char c : unit) all = all && byte_fallback_id[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : unit) push(byte_fallback_id[static_cast<unsigned char>(c)]);
        return;
      }
    }
    if (unk_id < 0) return;  // no <unk>: the unit is dropped, as the library does
    if (pending_unk >= 0 && fuse_unk) return;
    if (pending_unk >= 0) push(pending_unk);
    pending_unk = unk_id;
  };
  auto known = [&](int32_t tid) {
    if (pending_unk >= 0) {
      push(pending_unk);
      pending_unk = -1;
    }
    push(tid);
  };
  if (byte_level) {
    for (size_t i = 0; i < word.size(); ++i) {
      const int32_t tid = byte_unit[static_cast<unsigned char>(word[i])];
      if (tid >= 0) known(tid);
      else unknown(word.substr(i, 1));
    }
  } else {
    size_t i = 0;
    while (i < word.size()) {
      const int n = utf8_step(word, i);
      const size_t len = n > 0 ? n : 1;
      key.assign(word.data() + i, len);
      auto it = vocab.find(key);
      if (it != vocab.end()) known(it->second);
      else unknown(word.substr(i, len));
      i += len;
    }
  }
  if (pending_unk >= 0) push(pending_unk);
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }  // min-heap
  };
  thread_local std::vector<Candidate> heap;
  heap.clear();
  auto consider = [&](int32_t pos) {
    const int32_t nx = sym[pos].next;
    if (nx < 0) return;
    auto it = merges.find(pair_key(sym[pos].id, sym[nx].id));
    if (it != merges.end()) {
      heap.push_back({it->second.rank, pos, it->second.id});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t p = 0; p + 1 < static_cast<int32_t>(sym.size()); ++p) consider(p);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& s = sym[top.pos];
    if (!s.alive || s.next < 0) continue;
    Symbol& right = sym[s.next];
    auto it = merges.find(pair_key(s.id, right.id));
    if (it == merges.end() || it->second.id != top.new_id) continue;  // a stale entry
    s.id = top.new_id;
    right.alive = false;
    s.next = right.next;
    if (s.next >= 0) sym[s.next].prev = top.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(top.pos);
  }
  for (const Symbol& s : sym)
    if (s.alive) ids.push_back(s.id);
}

std::vector<int64_t> HfTokenizer::encode(const std::string& text_in) const {
  const Impl& m = *impl_;
  std::string repaired;
  std::string_view text = text_in;
  if (!valid_utf8(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 4);
  if (m.raw_matcher.empty()) {
    if (!text.empty()) m.encode_segment(text, true, out);
  } else {
    m.raw_matcher.split(text, [&](std::string_view seg, int32_t tid, size_t offset) {
      if (tid >= 0) out.push_back(tid);
      else m.encode_segment(seg, offset == 0, out);
    });
  }
  return out;
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t tid : ids) {
    if (tid < 0 || tid >= static_cast<int64_t>(m.id_to_token.size())) continue;
    auto a = m.added_by_id.find(static_cast<int32_t>(tid));
    if (a != m.added_by_id.end()) {
      if (!a->second->special) tokens.push_back(a->second->content);
      continue;
    }
    if (!m.id_to_token[tid].empty()) tokens.push_back(m.id_to_token[tid]);
  }
  if (!m.has_decoder) {  // the library joins tokens with spaces when a file names no decoder
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return utf8_lossy(out);
  }
  std::string bytes;
  for (const Decoder& d : m.decoders) {
    switch (d.kind) {
      case Decoder::kByteLevel: {  // all tokens -> bytes -> one string (lossy)
        std::string all;
        for (const auto& t : tokens) {
          if (byte_level_bytes(t, bytes)) all += bytes;
          else all += t;
        }
        tokens.assign(1, utf8_lossy(all));
        break;
      }
      case Decoder::kReplace:
        for (auto& t : tokens) replace_every(t, d.a, d.b);
        break;
      case Decoder::kByteFallback: {  // runs of <0xNN> -> their bytes if valid UTF-8, else one U+FFFD per byte
        std::vector<std::string> out;
        std::string run;
        size_t run_len = 0;
        auto flush = [&] {
          if (run_len == 0) return;
          if (valid_utf8(run)) {
            out.push_back(run);
          } else {
            std::string r;
            for (size_t k = 0; k < run_len; ++k) r += "\xEF\xBF\xBD";
            out.push_back(r);
          }
          run.clear();
          run_len = 0;
        };
        for (auto& t : tokens) {
          const bool byte_token = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
                                  std::isxdigit(static_cast<unsigned char>(t[3])) &&
                                  std::isxdigit(static_cast<unsigned char>(t[4]));
          if (byte_token) {
            run += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
            ++run_len;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens.swap(out);
        break;
      }
      case Decoder::kFuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Decoder::kStrip:
        for (auto& t : tokens) {
          for (int k = 0; k < d.start && t.compare(0, d.a.size(), d.a) == 0; ++k) t.erase(0, d.a.size());
          for (int k = 0; k < d.stop && t.size() >= d.a.size() &&
                          t.compare(t.size() - d.a.size(), d.a.size(), d.a) == 0;
               ++k)
            t.erase(t.size() - d.a.size());
        }
        break;
      case Decoder::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          replace_every(tokens[i], d.a, " ");
          if (i == 0 && d.prepend && !tokens[i].empty() && tokens[i][0] == ' ') tokens[i].erase(0, 1);
        }
        break;
    }
  }
  std::string out;
  for (const auto& t : tokens) out += t;
  return utf8_lossy(out);
}

int64_t HfTokenizer::vocab_size() const { return impl_->vocab_n; }
int64_t HfTokenizer::bos_id() const { return impl_->bos; }
int64_t HfTokenizer::eos_id() const { return impl_->eos; }
int64_t HfTokenizer::pad_id() const { return impl_->pad >= 0 ? impl_->pad : Tokenizer::pad_id(); }
std::string HfTokenizer::id() const { return impl_->id; }
const std::string& HfTokenizer::path() const { return impl_->path; }

std::string HfTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(impl_->id_to_token.size())) return "";
  return impl_->id_to_token[id];
}

int64_t HfTokenizer::token_to_id(const std::string& token) const {
  for (const auto& a : impl_->added)
    if (a.content == token) return a.id;
  auto it = impl_->vocab.find(token);
  return it == impl_->vocab.end() ? -1 : it->second;
}

}  // namespace mnemo
