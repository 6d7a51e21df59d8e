// The safetensors format (huggingface/safetensors): an 8-byte little-endian header length N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {string: string}} padded
// with spaces to a multiple of 8, then the raw little-endian tensor bytes; offsets are relative to the
// end of the header. Reading validates everything a writer could get wrong (header length against the
// file size, dtype, shape against the byte count, offsets inside the data, no overlap, no gap) and
// throws mnemo::Error naming the file and the tensor. Writing follows the reference writer: tensors in
// order of element size (largest first), then name, contiguous; the file appears atomically (tmp file,
// fsync, rename, folder fsync).
#pragma once
#include <torch/torch.h>

#include "core/atomic_file.h"  // write_file_atomic, for the writers that include this header

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mnemo {

// "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL" <-> LibTorch dtypes.
torch::ScalarType safetensors_scalar_type(const std::string& dtype);  // Error for other names
std::string safetensors_dtype_name(torch::ScalarType type);           // Error for other types
int64_t safetensors_dtype_size(const std::string& dtype);              // bytes per element

struct SafetensorsEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

// An opened and validated file; tensors are read on demand.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  // The tensor as stored (CPU, the file's dtype); Error naming the file if `name` is not in it.
  torch::Tensor load(const std::string& name) const;
  std::map<std::string, torch::Tensor> load_all() const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;  // 8 + header length
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (any device; made contiguous on the CPU) to `path`. Error for a duplicate or empty
// name, "__metadata__" as a name, or an unsupported dtype.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});


}  // namespace mnemo
