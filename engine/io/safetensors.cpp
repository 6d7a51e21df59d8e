#include "engine/io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/atomic_file.h"
#include "core/common.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.cpp reads and writes tensor bytes as they lie in memory: a little-endian host is required"
#endif

namespace mnemo {
namespace fs = std::filesystem;

namespace {

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
  int64_t size;
};

const DtypeInfo kDtypes[] = {
    {"F64", torch::kFloat64, 8}, {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kInt64, 8}, {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},     {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1}};

const DtypeInfo* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string known_dtypes() {
  std::string s;
  for (const auto& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// The reference implementation refuses headers above 100 MB.
constexpr uint64_t kMaxHeader = 100'000'000;

std::string shape_text(const std::vector<int64_t>& shape) { return json(shape).dump(); }

// numel * element size, or false on overflow.
bool byte_count(const std::vector<int64_t>& shape, int64_t elem, uint64_t& out) {
  uint64_t n = static_cast<uint64_t>(elem);
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  out = n;
  return true;
}

}  // namespace

torch::ScalarType safetensors_scalar_type(const std::string& dtype) {
  if (const DtypeInfo* d = find_dtype(dtype)) return d->type;
  throw Error("safetensors dtype '" + dtype + "' is not supported (supported: " + known_dtypes() + ")");
}

std::string safetensors_dtype_name(torch::ScalarType type) {
  for (const auto& d : kDtypes)
    if (d.type == type) return d.name;
  throw Error(std::string("tensor dtype ") + c10::toString(type) + " cannot be stored in safetensors (supported: " +
              known_dtypes() + ")");
}

int64_t safetensors_dtype_size(const std::string& dtype) {
  if (const DtypeInfo* d = find_dtype(dtype)) return d->size;
  throw Error("safetensors dtype '" + dtype + "' is not supported (supported: " + known_dtypes() + ")");
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error("safetensors file not found: " + path);
  const uint64_t file_size = fs::file_size(path, ec);
  if (ec) throw Error("cannot read " + path + ": " + ec.message());
  const std::string where = "safetensors file " + path;
  if (file_size < 8)
    throw Error(where + " is " + std::to_string(file_size) + " bytes, shorter than its 8-byte header length");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > file_size - 8)
    throw Error(where + ": header length " + std::to_string(n) + " exceeds the " + std::to_string(file_size - 8) +
                " bytes after the length field (truncated or not a safetensors file)");
  if (n > kMaxHeader) throw Error(where + ": header length " + std::to_string(n) + " exceeds the 100 MB limit");
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  if (!in) throw Error("cannot read the header of " + path);
  if (header.empty() || header[0] != '{') throw Error(where + ": the header does not start with '{'");
  json h;
  try {
    h = parse_json_text(header, "");  // trailing spaces (the padding) are whitespace
  } catch (const Error& e) {
    throw Error(where + ": the header is not valid JSON: " + e.what());
  }
  if (!h.is_object()) throw Error(where + ": the header is not a JSON object");
  data_start_ = 8 + n;
  const uint64_t data_size = file_size - data_start_;

  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error(where + ": __metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw Error(where + ": __metadata__ value of '" + m.key() + "' is not a string: " + json_excerpt(m.value()));
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string tw = where + ", tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      throw Error(tw + ": expected {\"dtype\", \"shape\", \"data_offsets\"}, got " + json_excerpt(v));
    SafetensorsEntry e;
    if (!v["dtype"].is_string()) throw Error(tw + ": dtype is not a string: " + json_excerpt(v["dtype"]));
    e.dtype = v["dtype"].get<std::string>();
    if (!find_dtype(e.dtype))
      throw Error(tw + ": dtype '" + e.dtype + "' is not supported (supported: " + known_dtypes() + ")");
    if (!v["shape"].is_array()) throw Error(tw + ": shape is not a list: " + json_excerpt(v["shape"]));
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned()) throw Error(tw + ": shape " + json_excerpt(v["shape"]) + " is not a list of sizes >= 0");
      e.shape.push_back(d.get<int64_t>());
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw Error(tw + ": data_offsets must be [begin, end] with integers >= 0, got " + json_excerpt(off));
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end) throw Error(tw + ": data_offsets " + json_excerpt(off) + " end before they begin");
    if (e.end > data_size)
      throw Error(tw + ": data_offsets " + json_excerpt(off) + " run past the " + std::to_string(data_size) +
                  " bytes of data (truncated file?)");
    uint64_t bytes = 0;
    if (!byte_count(e.shape, safetensors_dtype_size(e.dtype), bytes) || bytes != e.end - e.begin)
      throw Error(tw + ": dtype " + e.dtype + " and shape " + shape_text(e.shape) + " need " +
                  (bytes ? std::to_string(bytes) : std::string("an overflowing number of")) + " bytes, data_offsets " +
                  off.dump() + " hold " + std::to_string(e.end - e.begin));
    entries_[name] = std::move(e);
  }

  // The data section is exactly the tensors, one after another: no overlap, no gap, nothing after them.
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [name, e] : entries_) order.push_back({e.begin, name});
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : entries_.at(a.second).end < entries_.at(b.second).end;
  });
  uint64_t pos = 0;
  std::string prev;
  for (const auto& [begin, name] : order) {
    const SafetensorsEntry& e = entries_.at(name);
    if (begin < pos)
      throw Error(where + ", tensor '" + name + "': its bytes [" + std::to_string(e.begin) + ", " +
                  std::to_string(e.end) + ") overlap those of '" + prev + "'");
    if (begin > pos)
      throw Error(where + ", tensor '" + name + "': a gap of " + std::to_string(begin - pos) +
                  " bytes before its data_offsets (" + std::to_string(begin) + ")");
    pos = e.end;
    prev = name;
  }
  if (pos != data_size)
    throw Error(where + ": " + std::to_string(data_size - pos) + " bytes after the last tensor" +
                (prev.empty() ? std::string() : " ('" + prev + "')") + " belong to no tensor");
}

torch::Tensor SafetensorsFile::load(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw Error("safetensors file " + path_ + " has no tensor '" + name + "'");
  const SafetensorsEntry& e = it->second;
  auto t = torch::empty(e.shape, torch::TensorOptions().dtype(safetensors_scalar_type(e.dtype)));
  const uint64_t n = e.end - e.begin;
  if (n == 0) return t;
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + e.begin));
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(n));
  if (!in) throw Error("cannot read tensor '" + name + "' from " + path_ + " (file changed or truncated?)");
  return t;
}

std::map<std::string, torch::Tensor> SafetensorsFile::load_all() const {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, e] : entries_) out[name] = load(name);
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  struct Item {
    std::string name, dtype;
    torch::Tensor t;
    int64_t size;
  };
  std::vector<Item> items;
  std::map<std::string, int> seen;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw Error("cannot write " + path + ": tensor name '" + name + "' is not allowed in safetensors");
    if (seen[name]++) throw Error("cannot write " + path + ": tensor '" + name + "' is given twice");
    if (!tensor.defined()) throw Error("cannot write " + path + ": tensor '" + name + "' is undefined");
    std::string dtype;
    try {
      dtype = safetensors_dtype_name(tensor.scalar_type());
    } catch (const Error& e) {
      throw Error("cannot write " + path + ", tensor '" + name + "': " + e.what());
    }
    items.push_back({name, dtype, tensor.detach().to(torch::kCPU).contiguous(), safetensors_dtype_size(dtype)});
  }
  // The reference writer's order: larger elements first (keeps every tensor aligned), then by name.
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.size != b.size ? a.size > b.size : a.name < b.name; });
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t pos = 0;
  for (const Item& it : items) {
    const uint64_t n = static_cast<uint64_t>(it.t.numel()) * it.size;
    h[it.name] = {{"dtype", it.dtype}, {"shape", it.t.sizes().vec()}, {"data_offsets", {pos, pos + n}}};
    pos += n;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // the reference writer's padding
  AtomicFile o(path);  // tmp file, every write checked, fsync, rename, folder fsync
  unsigned char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  o.write(len, 8);
  o.write(header);
  for (const Item& it : items)
    if (it.t.numel() > 0) o.write(it.t.data_ptr(), static_cast<size_t>(it.t.numel() * it.size));
  o.commit();
}

}  // namespace mnemo
