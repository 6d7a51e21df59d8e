#include "synthetic/mad.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace mnemo {

// ---------------------------------------------------------------------------------------------
// Sampler: Lemire's multiply-shift for bounded integers (bias < n / 2^64), 53-bit doubles.

int64_t MadRng::below(int64_t n) {
  if (n <= 0) throw Error("mad: internal error: below(" + std::to_string(n) + ")");
  __uint128_t m = static_cast<__uint128_t>(gen_()) * static_cast<uint64_t>(n);
  return static_cast<int64_t>(m >> 64);
}

double MadRng::uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

std::vector<int64_t> MadRng::permutation(int64_t lo, int64_t n, int64_t k) {
  std::vector<int64_t> pool(n);
  std::iota(pool.begin(), pool.end(), lo);
  for (int64_t i = 0; i < k; ++i) std::swap(pool[i], pool[i + below(n - i)]);
  pool.resize(k);
  return pool;
}

// ---------------------------------------------------------------------------------------------
// Names, baselines, parameters.

const std::vector<MadTask>& mad_tasks() {
  static const std::vector<MadTask> all = {MadTask::in_context_recall,       MadTask::noisy_in_context_recall,
                                           MadTask::fuzzy_in_context_recall, MadTask::memorization,
                                           MadTask::compression,             MadTask::selective_copying};
  return all;
}

std::string mad_task_name(MadTask t) {
  switch (t) {
    case MadTask::in_context_recall: return "in_context_recall";
    case MadTask::noisy_in_context_recall: return "noisy_in_context_recall";
    case MadTask::fuzzy_in_context_recall: return "fuzzy_in_context_recall";
    case MadTask::selective_copying: return "selective_copying";
    case MadTask::compression: return "compression";
    case MadTask::memorization: return "memorization";
  }
  throw Error("mad: unknown task enum");
}

MadTask mad_task_from_name(const std::string& name) {
  std::string n = name;
  std::replace(n.begin(), n.end(), '-', '_');
  if (n.rfind("mad_", 0) == 0) n = n.substr(4);
  std::string known;
  for (MadTask t : mad_tasks()) {
    if (mad_task_name(t) == n) return t;
    known += (known.empty() ? "" : ", ") + mad_task_name(t);
  }
  throw Error("unknown MAD task '" + name + "'; MAD tasks: " + known);
}

MadParams mad_baseline(MadTask t) {
  MadParams p;
  switch (t) {
    case MadTask::in_context_recall: break;  // V = 16, L = 128, multi_query
    case MadTask::noisy_in_context_recall:
      p.vocab_size = 32;
      p.noise_vocab_size = 16;
      p.frac_noise = 0.2;
      break;
    case MadTask::fuzzy_in_context_recall:
      p.k_motif_size = 3;
      p.v_motif_size = 3;
      break;
    case MadTask::selective_copying:
      p.seq_len = 256;
      p.num_tokens_to_copy = 16;
      break;
    case MadTask::compression: p.seq_len = 32; break;
    case MadTask::memorization:
      p.vocab_size = 256;
      p.seq_len = 32;
      break;
  }
  return p;
}

int64_t mad_baseline_n_train(MadTask t) { return t == MadTask::memorization ? 256 : 12800; }

std::vector<std::string> mad_param_keys(MadTask t) {
  switch (t) {
    case MadTask::in_context_recall:
    case MadTask::noisy_in_context_recall:
      return {"vocab_size", "seq_len", "multi_query", "frac_noise", "noise_vocab_size"};
    case MadTask::fuzzy_in_context_recall:
      return {"vocab_size", "seq_len", "k_motif_size", "v_motif_size", "multi_query", "frac_noise",
              "noise_vocab_size"};
    case MadTask::selective_copying: return {"vocab_size", "seq_len", "num_tokens_to_copy"};
    case MadTask::compression: return {"vocab_size", "seq_len", "frac_noise", "noise_vocab_size"};
    case MadTask::memorization:
      return {"vocab_size", "seq_len", "kv_map_seed", "frac_noise", "noise_vocab_size"};
  }
  return {};
}

json mad_params_to_json(MadTask t, const MadParams& p) {
  const json all = {{"vocab_size", p.vocab_size},
                    {"seq_len", p.seq_len},
                    {"frac_noise", p.frac_noise},
                    {"noise_vocab_size", p.noise_vocab_size},
                    {"num_tokens_to_copy", p.num_tokens_to_copy},
                    {"k_motif_size", p.k_motif_size},
                    {"v_motif_size", p.v_motif_size},
                    {"multi_query", p.multi_query},
                    {"kv_map_seed", p.kv_map_seed}};
  json out = json::object();
  for (const auto& k : mad_param_keys(t)) out[k] = all.at(k);
  return out;
}

MadParams mad_params_from_json(MadTask t, const json& overrides) {
  MadParams p = mad_baseline(t);
  if (overrides.is_null()) return p;
  if (!overrides.is_object()) throw Error("mad_" + mad_task_name(t) + ": parameters must be a JSON object");
  const auto keys = mad_param_keys(t);
  for (auto it = overrides.begin(); it != overrides.end(); ++it) {
    const std::string& k = it.key();
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      std::string known;
      for (const auto& key : keys) known += (known.empty() ? "" : ", ") + key;
      throw Error("mad_" + mad_task_name(t) + ": unknown parameter '" + k + "'; known: " + known);
    }
    const json& v = it.value();
    try {
      if (k == "vocab_size") p.vocab_size = v.get<int64_t>();
      else if (k == "seq_len") p.seq_len = v.get<int64_t>();
      else if (k == "frac_noise") p.frac_noise = v.get<double>();
      else if (k == "noise_vocab_size") p.noise_vocab_size = v.get<int64_t>();
      else if (k == "num_tokens_to_copy") p.num_tokens_to_copy = v.get<int64_t>();
      else if (k == "k_motif_size") p.k_motif_size = v.get<int64_t>();
      else if (k == "v_motif_size") p.v_motif_size = v.get<int64_t>();
      else if (k == "multi_query") p.multi_query = v.is_number_integer() ? v.get<int64_t>() != 0 : v.get<bool>();
      else if (k == "kv_map_seed") p.kv_map_seed = v.get<int64_t>();
    } catch (const json::exception&) {
      throw Error("mad_" + mad_task_name(t) + ": parameter '" + k + "' has the wrong type: " + json_excerpt(v));
    }
  }
  validate(t, p);
  return p;
}

void validate(MadTask t, const MadParams& p) {
  const std::string task = "mad_" + mad_task_name(t);
  auto fail = [&](const std::string& m) { throw Error(task + ": " + m); };
  auto str = [](auto v) { return std::to_string(v); };
  if (p.seq_len <= 0) fail("seq_len must be > 0, got " + str(p.seq_len));
  if (p.vocab_size < 3) fail("vocab_size must be >= 3, got " + str(p.vocab_size));
  if (p.noise_vocab_size < 0) fail("noise_vocab_size must be >= 0, got " + str(p.noise_vocab_size));
  if (!(p.frac_noise >= 0.0 && p.frac_noise < 1.0)) fail("frac_noise must be in [0, 1), got " + std::to_string(p.frac_noise));
  if (p.frac_noise > 0 && p.noise_vocab_size == 0) fail("noise_vocab_size must be > 0 when frac_noise > 0");
  switch (t) {
    case MadTask::in_context_recall:
    case MadTask::noisy_in_context_recall: {
      if (p.seq_len % 2 != 0 || p.seq_len < 4) fail("seq_len must be even and >= 4, got " + str(p.seq_len));
      int64_t ns = (p.multi_query ? p.vocab_size : p.vocab_size - 1) - p.noise_vocab_size;
      if (ns < 2)
        fail("vocab_size (" + str(p.vocab_size) + ") leaves " + str(ns) + " key/value tokens after noise_vocab_size " +
             str(p.noise_vocab_size) + (p.multi_query ? "" : " and the copy prefix") + "; need >= 2");
      break;
    }
    case MadTask::fuzzy_in_context_recall: {
      if (p.k_motif_size < 1 || p.v_motif_size < 1) fail("k_motif_size and v_motif_size must be >= 1");
      int64_t ns = (p.multi_query ? p.vocab_size - 1 : p.vocab_size - 2) - p.noise_vocab_size;
      int64_t nk = ns / 2, nv = ns - nk;
      if (nk < p.k_motif_size || nv < p.v_motif_size)
        fail("vocab_size (" + str(p.vocab_size) + ") gives " + str(nk) + " key and " + str(nv) +
             " value tokens; need at least k_motif_size (" + str(p.k_motif_size) + ") and v_motif_size (" +
             str(p.v_motif_size) + ")");
      if (p.seq_len <= 2 * (p.k_motif_size + p.v_motif_size))
        fail("seq_len (" + str(p.seq_len) + ") must exceed 2 * (k_motif_size + v_motif_size) = " +
             str(2 * (p.k_motif_size + p.v_motif_size)));
      break;
    }
    case MadTask::selective_copying:
      if (p.num_tokens_to_copy < 1) fail("num_tokens_to_copy must be >= 1, got " + str(p.num_tokens_to_copy));
      if (p.seq_len <= 2 * p.num_tokens_to_copy + 1)
        fail("seq_len (" + str(p.seq_len) + ") must be > 2 * num_tokens_to_copy + 1 = " +
             str(2 * p.num_tokens_to_copy + 1));
      break;
    case MadTask::compression:
      if (p.seq_len < 2) fail("seq_len must be >= 2, got " + str(p.seq_len));
      if (p.vocab_size - 1 - p.noise_vocab_size < 1) fail("vocab_size leaves no content tokens after the noise vocabulary");
      break;
    case MadTask::memorization:
      if (p.seq_len % 2 != 0) fail("seq_len must be even, got " + str(p.seq_len));
      if ((p.vocab_size - 1 - p.noise_vocab_size) < 2) fail("vocab_size leaves fewer than 2 key/value tokens");
      break;
  }
}

int64_t mad_input_length(MadTask t, const MadParams& p) {
  if (t == MadTask::in_context_recall || t == MadTask::noisy_in_context_recall)
    return p.multi_query ? p.seq_len - 1 : p.seq_len;
  return p.seq_len;
}

// ---------------------------------------------------------------------------------------------
// Generators (mad/data/instances.py). Token sequences are built with their targets, then the
// recall tasks apply the autoregressive shift: train (tokens[:-1], tokens[1:]), test
// (tokens[:-1], targets[1:]).

namespace {

TokenExample shifted(const std::vector<int64_t>& tokens, const std::vector<int64_t>& targets, Split split) {
  TokenExample ex;
  ex.input_ids.assign(tokens.begin(), tokens.end() - 1);
  if (split == Split::train)
    ex.labels.assign(tokens.begin() + 1, tokens.end());
  else
    ex.labels.assign(targets.begin() + 1, targets.end());
  return ex;
}

// In-context recall (and its noisy variant): L/2 - 1 slots of (key, value) or 2 noise tokens,
// then a probe of an already-presented key.
TokenExample in_context_recall(const MadParams& p, Split split, MadRng& rng) {
  const int64_t V = p.vocab_size;
  const int64_t copy_prefix = V - 1;
  const int64_t ns = (p.multi_query ? V : V - 1) - p.noise_vocab_size;
  const int64_t n_keys = ns / 2, n_values = ns - n_keys;
  const int64_t slots = p.seq_len / 2;
  // [decision] The protected (never-noise) slot is drawn among the slots of the loop; mad-lab
  // draws it from all L/2 slots, so with probability 2/L no slot is protected.
  const int64_t protected_slot = rng.below(slots - 1);
  std::vector<int64_t> kv(n_keys, -1), presented_order;
  std::vector<bool> presented(n_keys, false);
  std::vector<int64_t> tokens, targets;
  for (int64_t i = 0; i + 1 < slots; ++i) {
    const bool noise = p.frac_noise > 0 && i != protected_slot && rng.uniform() < p.frac_noise;
    if (noise) {
      for (int j = 0; j < 2; ++j) {
        tokens.push_back(ns + rng.below(p.noise_vocab_size));
        targets.push_back(kIgnoreLabel);
      }
      continue;
    }
    const int64_t k = rng.below(n_keys);
    if (kv[k] < 0) kv[k] = n_keys + rng.below(n_values);
    const int64_t v = kv[k];
    tokens.push_back(k);
    tokens.push_back(v);
    targets.push_back(kIgnoreLabel);
    targets.push_back(presented[k] && p.multi_query ? v : kIgnoreLabel);
    if (!presented[k]) presented_order.push_back(k);
    presented[k] = true;
  }
  const int64_t k_probe = presented_order[rng.below(presented_order.size())];
  if (!p.multi_query) {
    tokens.push_back(copy_prefix);
    targets.push_back(kIgnoreLabel);
  }
  tokens.push_back(k_probe);
  tokens.push_back(kv[k_probe]);
  targets.push_back(kIgnoreLabel);
  targets.push_back(kv[k_probe]);
  TokenExample ex = shifted(tokens, targets, split);
  ex.meta = {{"probe_key", k_probe}};
  return ex;
}

// Fuzzy in-context recall: keys and values are motifs of 1..k (1..v) distinct tokens; a probe
// pair is inserted at a random position and asked again at the end; left-padded to L + 1.
TokenExample fuzzy_in_context_recall(const MadParams& p, Split split, MadRng& rng) {
  using Motif = std::vector<int64_t>;
  const int64_t V = p.vocab_size, L = p.seq_len, km = p.k_motif_size, vm = p.v_motif_size;
  const bool train = split == Split::train;
  const int64_t copy_prefix = V - 1;
  const int64_t pad = p.multi_query ? V - 1 : V - 2;
  const int64_t ns = (p.multi_query ? V - 1 : V - 2) - p.noise_vocab_size;
  const int64_t n_keys = ns / 2, n_values = ns - n_keys;
  auto key_size = [&] { return train ? 1 + rng.below(km) : km; };  // test: maximal keys only
  auto value_size = [&] { return 1 + rng.below(vm); };

  const int64_t k_probe_size = key_size(), v_probe_size = value_size();
  const Motif k_probe = rng.permutation(0, n_keys, k_probe_size);
  const Motif v_probe = rng.permutation(n_keys, n_values, v_probe_size);
  const int64_t probe_len = k_probe_size + v_probe_size;
  const int64_t probe_at = rng.below(L - 2 * probe_len);
  bool probe_added = false;

  std::map<Motif, Motif> kv_map, presented;
  std::vector<int64_t> tokens, targets;
  auto append = [](std::vector<int64_t>& dst, const Motif& m) { dst.insert(dst.end(), m.begin(), m.end()); };
  auto ignore = [&](int64_t n) { targets.insert(targets.end(), n, kIgnoreLabel); };
  while (static_cast<int64_t>(tokens.size()) < L - probe_len - (km + vm)) {
    const int64_t ks = key_size(), vs = value_size();
    if (static_cast<int64_t>(tokens.size()) >= probe_at && !probe_added) {
      append(tokens, k_probe);
      append(tokens, v_probe);
      ignore(probe_len);
      kv_map[k_probe] = v_probe;
      presented[k_probe] = v_probe;
      probe_added = true;
      continue;
    }
    if (p.frac_noise > 0 && rng.uniform() < p.frac_noise) {
      for (int64_t j = 0; j < ks + vs; ++j) tokens.push_back(ns + rng.below(p.noise_vocab_size));
      ignore(ks + vs);
      continue;
    }
    const Motif k = rng.permutation(0, n_keys, ks);
    Motif v;
    if (k == k_probe) {
      v = v_probe;
      probe_added = true;
    } else if (kv_map.count(k)) {
      v = kv_map[k];
    } else {
      v = rng.permutation(n_keys, n_values, vs);
      kv_map[k] = v;
    }
    append(tokens, k);
    append(tokens, v);
    ignore(ks);
    if (presented.count(k) && p.multi_query)
      append(targets, v);
    else
      ignore(v.size());
    presented[k] = v;
  }
  if (!p.multi_query) {
    tokens.push_back(copy_prefix);
    ignore(1);
  }
  append(tokens, k_probe);
  append(tokens, v_probe);
  ignore(k_probe_size);
  append(targets, v_probe);
  // Left-pad to L + 1 (one extra for the shift); the loop bound keeps tokens.size() < L.
  const int64_t n_pad = L + 1 - static_cast<int64_t>(tokens.size());
  tokens.insert(tokens.begin(), n_pad, pad);
  targets.insert(targets.begin(), n_pad, kIgnoreLabel);
  TokenExample ex = shifted(tokens, targets, split);
  // mad-lab inserts the probe pair only if the sequence reaches probe_at before the loop ends,
  // so the final query may ask for an unseen key (kept; recorded here).
  ex.meta = {{"probe_in_context", probe_added}};
  return ex;
}

// Selective copying: `copy` tokens from [0, V-2) with L - 2 copy - 1 blanks (V-2) inserted
// before random ones of them (np.insert at indices in [0, copy)), the copy token (V-1), then
// `copy` blanks whose (unshifted) targets are the tokens to copy in order.
TokenExample selective_copying(const MadParams& p, MadRng& rng) {
  const int64_t V = p.vocab_size, L = p.seq_len, C = p.num_tokens_to_copy;
  const int64_t copy_token = V - 1, blank = V - 2;
  const int64_t n_blank = L - 2 * C - 1;
  std::vector<int64_t> to_copy(C), blanks_before(C, 0);
  for (auto& t : to_copy) t = rng.below(V - 2);
  for (int64_t b = 0; b < n_blank; ++b) ++blanks_before[rng.below(C)];
  TokenExample ex;
  for (int64_t i = 0; i < C; ++i) {
    ex.input_ids.insert(ex.input_ids.end(), blanks_before[i], blank);
    ex.input_ids.push_back(to_copy[i]);
  }
  ex.input_ids.push_back(copy_token);
  ex.input_ids.insert(ex.input_ids.end(), C, blank);
  ex.labels.assign(C + n_blank + 1, kIgnoreLabel);
  ex.labels.insert(ex.labels.end(), to_copy.begin(), to_copy.end());
  return ex;
}

// Compression: L - 1 random tokens from [0, V-1-noise) and the compression token V-1; the target
// is the input itself (the model is an encoder-decoder, runtime/mad_autoencoder.h).
// [decision] noise positions are not scored (mad-lab intends this but returns the inputs).
TokenExample compression(const MadParams& p, MadRng& rng) {
  const int64_t V = p.vocab_size, L = p.seq_len;
  const int64_t ns = V - 1 - p.noise_vocab_size;
  TokenExample ex;
  for (int64_t i = 0; i + 1 < L; ++i) ex.input_ids.push_back(rng.below(ns));
  ex.input_ids.push_back(V - 1);
  ex.labels = ex.input_ids;
  if (p.frac_noise > 0)
    for (int64_t i = 0; i + 1 < L; ++i)
      if (rng.uniform() < p.frac_noise) {
        ex.input_ids[i] = ns + rng.below(p.noise_vocab_size);
        ex.labels[i] = kIgnoreLabel;
      }
  return ex;
}

// Memorization: L/2 pairs (key, INSERT = V-1); the target at INSERT is the key's value in the
// fixed global map (no shift).
TokenExample memorization(const MadParams& p, MadRng& rng) {
  const int64_t V = p.vocab_size, insert = V - 1;
  const int64_t ns = V - 1 - p.noise_vocab_size;
  // The map depends only on (ns, kv_map_seed): cache the last one (sweeps use one setting).
  thread_local std::pair<std::pair<int64_t, int64_t>, std::vector<int64_t>> cache{{-1, -1}, {}};
  if (cache.first != std::make_pair(ns, p.kv_map_seed))
    cache = {{ns, p.kv_map_seed}, mad_memorization_map(ns, static_cast<uint64_t>(p.kv_map_seed))};
  const auto& value_of = cache.second;
  const int64_t n_keys = ns / 2, pairs = p.seq_len / 2;
  const int64_t protected_slot = rng.below(pairs);
  TokenExample ex;
  for (int64_t i = 0; i < pairs; ++i) {
    if (p.frac_noise > 0 && i != protected_slot && rng.uniform() < p.frac_noise) {
      for (int j = 0; j < 2; ++j) {
        ex.input_ids.push_back(ns + rng.below(p.noise_vocab_size));
        ex.labels.push_back(kIgnoreLabel);
      }
      continue;
    }
    const int64_t k = rng.below(n_keys);
    ex.input_ids.push_back(k);
    ex.input_ids.push_back(insert);
    ex.labels.push_back(kIgnoreLabel);
    ex.labels.push_back(value_of[k]);
  }
  return ex;
}

}  // namespace

std::vector<int64_t> mad_memorization_map(int64_t n, uint64_t seed) {
  MadRng rng(seed);
  const int64_t n_keys = n / 2, n_values = n - n_keys;
  auto keys = rng.permutation(0, n_keys, n_keys);
  auto values = rng.permutation(n_keys, n_values, n_values);
  std::vector<int64_t> value_of(n, -1);
  for (int64_t i = 0; i < std::min(n_keys, n_values); ++i) value_of[keys[i]] = values[i];
  return value_of;
}

TokenExample mad_example(MadTask t, const MadParams& p, Split split, uint64_t example_seed) {
  MadRng rng(example_seed);
  switch (t) {
    case MadTask::in_context_recall:
    case MadTask::noisy_in_context_recall: return in_context_recall(p, split, rng);
    case MadTask::fuzzy_in_context_recall: return fuzzy_in_context_recall(p, split, rng);
    case MadTask::selective_copying: return selective_copying(p, rng);
    case MadTask::compression: return compression(p, rng);
    case MadTask::memorization: return memorization(p, rng);
  }
  throw Error("mad: unknown task enum");
}

// ---------------------------------------------------------------------------------------------
// Difficulty grids (configs/tasks/*.yml "changes").

std::vector<json> mad_difficulty_settings(MadTask t) {
  std::vector<std::pair<std::string, json>> changes;
  const json n_train = {6400, 3200, 1600, 800};
  switch (t) {
    case MadTask::in_context_recall:
    case MadTask::fuzzy_in_context_recall:
      changes = {{"vocab_size", {32, 64, 128}}, {"seq_len", {256, 512, 1024}}, {"n_train", n_train}};
      break;
    case MadTask::noisy_in_context_recall:
      changes = {{"vocab_size", {48, 80, 144}},
                 {"seq_len", {256, 512, 1024}},
                 {"n_train", n_train},
                 {"frac_noise", {0.4, 0.6, 0.8}}};
      break;
    case MadTask::selective_copying:
      changes = {{"vocab_size", {32, 64, 128}},
                 {"seq_len", {512, 1024}},
                 {"n_train", n_train},
                 {"num_tokens_to_copy", {32, 64, 96}}};
      break;
    case MadTask::compression:
      changes = {{"vocab_size", {32, 64, 128}}, {"seq_len", {64, 128, 256}}, {"n_train", n_train}};
      break;
    case MadTask::memorization: changes = {{"vocab_size", {512, 1024, 2048, 4096, 8192}}}; break;
  }
  std::vector<json> settings = {json::object()};
  for (const auto& [key, values] : changes)
    for (const auto& v : values) settings.push_back({{key, v}});
  return settings;
}

}  // namespace mnemo
