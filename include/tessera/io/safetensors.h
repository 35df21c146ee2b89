#pragma once
// safetensors, exactly per its specification: an 8-byte little-endian header
// length N, N bytes of JSON ({"name": {"dtype", "shape", "data_offsets"}, ...,
// optional "__metadata__": {str: str}}), then the raw little-endian data, every
// byte of which belongs to exactly one tensor. Loading never executes anything
// and checks every size and offset before use; an invalid file is an error that
// names the problem and the byte offset or tensor.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/io/file.h"

namespace tessera::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

// A parsed file. Tensors are views of the memory-mapped file (copy-on-write),
// or copies when an offset is not aligned for its dtype.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  // Parses a file image in memory (`what` names it in errors). The buffer is copied.
  static SafetensorsFile parse(const char* data, size_t size, const std::string& what = "safetensors data");

  const std::vector<std::string>& names() const { return names_; }  // in data order
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  Tensor get(const std::string& name) const;
  NamedTensors all() const;
  const Metadata& metadata() const { return metadata_; }

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    size_t begin, end;  // absolute offsets in the file
  };
  void parse_header(const std::string& what);
  std::shared_ptr<const void> keep_;  // the mapping or buffer
  const char* data_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> names_;
  Metadata metadata_;
};

NamedTensors load_safetensors(const std::string& path, Metadata* metadata = nullptr);
// Writes atomically (see write_file_atomic). Names must be unique.
void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});
// The file image in memory (for tests and fuzzing).
std::string safetensors_bytes(const NamedTensors& tensors, const Metadata& metadata = {});

// safetensors dtype name <-> Tessera dtype ("F32" <-> F32, "BOOL" <-> Bool, ...).
const char* safetensors_dtype_name(DType t);

}  // namespace tessera::io
