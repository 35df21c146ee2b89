#pragma once
// GGUF, llama.cpp's model file (versions 2 and 3): "GGUF", a version, the
// tensor and key/value counts, typed metadata key/values, one info per tensor
// (name, dimensions, ggml type, offset), padding to the alignment, then the
// data section, where each tensor starts at its offset (a multiple of the
// alignment, general.alignment or 32). Little-endian throughout.
//
// Reading never executes anything and checks every count, length, offset and
// size against the file before it is used: a string or array cannot be longer
// than the bytes left, tensors cannot overlap or run past the end, dimensions
// cannot overflow. An invalid file is an error naming the problem and where
// it is (byte offset, key or tensor). Tensor data stays in a read-only
// memory map of the file.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::llm {

// ggml's tensor types that Tessera reads and writes (the numbers are ggml's).
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, Q4_K = 12, Q6_K = 14, BF16 = 30 };
inline constexpr GgmlType kGgmlTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                                          GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K};

const char* ggml_type_name(GgmlType t);
// "F32", "q8_0", ... (any case) -> the type; nullopt for a name Tessera lacks.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);
// Elements per block and bytes per block (1 and the element size for F32/F16/BF16).
int64_t ggml_block_size(GgmlType t);
int64_t ggml_block_bytes(GgmlType t);
// Bytes of a row of n elements (n a multiple of the block size).
int64_t ggml_row_bytes(GgmlType t, int64_t n);
// llama.cpp's general.file_type for a file whose weights are F32, F16, BF16,
// Q8_0 or Q4_0 (an error for the other types).
int64_t ggml_file_type(GgmlType weights);

// A metadata value's type (the numbers are GGUF's).
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
  String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GgufType t);

// A metadata value: a number, a bool, a string, or an array of one of those
// (arrays of arrays are refused). Integers are kept as int64 (a U64 above
// INT64_MAX as its bit pattern: as_uint() gives it back).
class GgufValue {
 public:
  GgufValue() = default;
  static GgufValue integer(GgufType type, int64_t v);  // U8 ... I64
  static GgufValue floating(GgufType type, double v);  // F32, F64
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue integers(GgufType elem, std::vector<int64_t> v);
  static GgufValue floats(GgufType elem, std::vector<double> v);
  static GgufValue bools(std::vector<bool> v);
  static GgufValue strings(std::vector<std::string> v);

  GgufType type() const { return type_; }
  GgufType elem_type() const { return elem_; }  // arrays only
  bool is_array() const { return type_ == GgufType::Array; }
  size_t size() const;                          // an array's length
  std::string type_str() const;                 // "u32", "array[string]"

  // Typed reads (`what` names the value in errors, e.g. its key). An integer
  // of any width reads as int or uint when it fits; as_float also takes
  // integers.
  int64_t as_int(std::string_view what = "value") const;
  uint64_t as_uint(std::string_view what = "value") const;
  double as_float(std::string_view what = "value") const;
  bool as_bool(std::string_view what = "value") const;
  const std::string& as_string(std::string_view what = "value") const;
  const std::vector<int64_t>& as_ints(std::string_view what = "value") const;  // integer or bool arrays
  const std::vector<double>& as_floats(std::string_view what = "value") const;
  const std::vector<std::string>& as_strings(std::string_view what = "value") const;
  // An integer or bool scalar as stored (a U64 as its bit pattern), for writers.
  int64_t raw_integer() const { return i_; }

  // Short text of the value for listings (long strings and arrays elided).
  std::string summary(size_t max_chars = 80) const;
  bool operator==(const GgufValue&) const = default;

 private:
  GgufType type_ = GgufType::U8, elem_ = GgufType::U8;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::vector<int64_t> ints_;
  std::vector<double> floats_;
  std::vector<std::string> strings_;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml's order: ne[0] is the contiguous dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;      // from the start of the data section
  uint64_t nbytes = 0;
  Shape shape() const;      // row-major: ne reversed ([rows, cols] for a matrix)
  int64_t numel() const;
};

// Rethrows e, an Error met while reading the GGUF file `what` (a key of the
// wrong type, a shape that does not fit), with the file named first unless
// its message names it already; OutOfMemoryError and InternalError pass as
// they are. Called from the catch block that caught e.
[[noreturn]] void rethrow_naming_file(const std::string& what, const Error& e);

// Whether `path` is a GGUF file (it begins with "GGUF"); false for a folder,
// another file, or one that cannot be read.
bool is_gguf_file(const std::string& path);

class GgufFile {
 public:
  static GgufFile open(const std::string& path);
  // Parses a file image in memory (`what` names it in errors); the bytes are copied.
  static GgufFile parse(const char* data, size_t size, const std::string& what = "GGUF data");

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // where the data section starts
  size_t file_size() const { return size_; }
  const std::string& what() const { return what_; }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }  // file order
  const GgufValue* find(std::string_view key) const;
  // The value of a required key; an error naming the key and the file if absent.
  const GgufValue& get(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // file order
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const GgufTensorInfo& tensor_info(std::string_view name) const;
  // The tensor's bytes (nbytes of them) in the mapping.
  const char* tensor_data(const GgufTensorInfo& t) const { return data_ + data_offset_ + t.offset; }
  // F32, F16 and BF16 tensors as a Tensor of the row-major shape: a view of the
  // mapping (or a copy where the offset is not aligned for the dtype). A
  // quantized tensor as U8 [rows, row bytes] holding its blocks.
  Tensor tensor(std::string_view name) const;
  // Drops the mapped pages wholly inside [p, p + n) from the process's
  // memory (the engine's repacked copy of a matrix replaces them); a later
  // read maps them in again from the file. Nothing for a parsed image.
  void release(const char* p, size_t n) const;

 private:
  void parse_all();
  std::shared_ptr<const void> keep_;  // the mapping or buffer
  bool mapped_ = false;               // keep_ is a file mapping
  const char* data_ = nullptr;
  size_t size_ = 0;
  std::string what_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<GgufTensorInfo> tensors_;
};

// Builds a GGUF file (version 3): metadata in the order set, tensors in the
// order added, each tensor's data at the next multiple of the alignment.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32);
  // Sets a key (replacing its value if already set, keeping its place).
  void set(const std::string& key, GgufValue v);
  // An F32, F16 or BF16 tensor, stored as that type; its row-major shape
  // becomes ne reversed.
  void add_tensor(const std::string& name, const Tensor& t);
  // Raw data of a ggml type: `data` is a U8 tensor of exactly the bytes the
  // dimensions need (ne in ggml's order).
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, const Tensor& data);

  std::string bytes() const;              // the file image
  void save(const std::string& path) const;  // atomically (io::write_file_atomic)

 private:
  struct Entry {
    GgufTensorInfo info;
    Tensor data;  // contiguous bytes
  };
  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Entry> tensors_;
};

// A tensor's values in f32, as [rows, ne[0]] (rows: the other dimensions'
// product): F32/F16/BF16 converted, Q8_0/Q4_0/Q4_K/Q6_K dequantized.
Tensor dequantize_gguf_tensor(const GgufFile& f, const GgufTensorInfo& t);

}  // namespace tessera::llm
