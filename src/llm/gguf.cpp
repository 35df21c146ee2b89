#include "tessera/llm/gguf.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include <sys/mman.h>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/io/file.h"

namespace tessera::llm {

static_assert(std::endian::native == std::endian::little, "GGUF files are read as little-endian");

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kMaxDims = 4;        // ggml's GGML_MAX_DIMS
constexpr size_t kMaxTensorName = 63;   // ggml's GGML_MAX_NAME, less its NUL
constexpr size_t kMaxKey = 65535;       // the specification's limit on keys
constexpr int64_t kMaxElements = int64_t{1} << 50;
// Array elements decoded from one file: an element takes 8 (numbers) to 32
// (strings) bytes in memory for 1 to 8 on disk, so the bytes left alone do
// not bound memory. A large vocabulary has under a million entries.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 26;

// ggml's names for every type number it defines, so that an error can say
// which type a file uses that Tessera does not read.
const char* ggml_any_type_name(uint32_t t) {
  static const char* const names[] = {
      "F32",     "F16",    "Q4_0",   "Q4_1",   "Q4_2",  "Q4_3",  "Q5_0",    "Q5_1",    "Q8_0",  "Q8_1",
      "Q2_K",    "Q3_K",   "Q4_K",   "Q5_K",   "Q6_K",  "Q8_K",  "IQ2_XXS", "IQ2_XS",  "IQ3_XXS", "IQ1_S",
      "IQ4_NL",  "IQ3_S",  "IQ2_S",  "IQ4_XS", "I8",    "I16",   "I32",     "I64",     "F64",   "IQ1_M",
      "BF16",    "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8",
      "MXFP4"};
  return t < std::size(names) ? names[t] : nullptr;
}

bool known_ggml_type(uint32_t t) {
  for (GgmlType k : kGgmlTypes)
    if (static_cast<uint32_t>(k) == t) return true;
  return false;
}

std::string supported_types() {
  std::string s;
  for (GgmlType t : kGgmlTypes) s += std::string(s.empty() ? "" : ", ") + ggml_type_name(t);
  return s;
}

// The smallest encoding of one array element of a type, to bound a count by
// the bytes left before anything is allocated.
uint64_t min_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::String: return 8;  // its length
    default: return 8;
  }
}

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}

// A cursor over the file image: every read is checked against the bytes left.
class Cursor {
 public:
  Cursor(const char* p, size_t n, const std::string& what) : p_(p), n_(n), what_(what) {}
  size_t pos() const { return pos_; }
  size_t left() const { return n_ - pos_; }

  void need(uint64_t bytes, std::string_view field) const {
    TS_CHECK(bytes <= left(), what_, ": ", field, " at byte ", pos_, " needs ", bytes, " bytes, but the file has ",
             left(), " left (truncated, or a length that lies)");
  }
  template <typename T>
  T read(std::string_view field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string string(std::string_view field) {
    const uint64_t len = read<uint64_t>(field);
    need(len, field);
    std::string s(p_ + pos_, static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  const char* p_;
  size_t n_;
  const std::string& what_;
  size_t pos_ = 0;
};

GgufType value_type(uint32_t t, const std::string& what, const std::string& key, size_t at) {
  TS_CHECK(t <= static_cast<uint32_t>(GgufType::F64), what, ": key '", key, "' has value type ", t, " at byte ", at,
           " (GGUF's types are 0 to 12)");
  return static_cast<GgufType>(t);
}

int64_t read_integer(Cursor& c, GgufType t, std::string_view field) {
  switch (t) {
    case GgufType::U8: return c.read<uint8_t>(field);
    case GgufType::I8: return c.read<int8_t>(field);
    case GgufType::U16: return c.read<uint16_t>(field);
    case GgufType::I16: return c.read<int16_t>(field);
    case GgufType::U32: return c.read<uint32_t>(field);
    case GgufType::I32: return c.read<int32_t>(field);
    case GgufType::U64: return static_cast<int64_t>(c.read<uint64_t>(field));
    default: return c.read<int64_t>(field);
  }
}

bool read_bool(Cursor& c, const std::string& what, const std::string& key) {
  const size_t at = c.pos();
  const uint8_t b = c.read<uint8_t>("a bool");
  TS_CHECK(b <= 1, what, ": key '", key, "' has a bool of byte value ", int{b}, " at byte ", at, " (must be 0 or 1)");
  return b == 1;
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& what, const std::string& key, uint64_t& elements) {
  const std::string field = "the value of '" + key + "'";
  if (is_integer(t)) return GgufValue::integer(t, read_integer(c, t, field));
  switch (t) {
    case GgufType::F32: return GgufValue::floating(t, c.read<float>(field));
    case GgufType::F64: return GgufValue::floating(t, c.read<double>(field));
    case GgufType::Bool: return GgufValue::boolean(read_bool(c, what, key));
    case GgufType::String: return GgufValue::string(c.string(field));
    default: break;
  }
  const size_t at = c.pos();
  const GgufType elem = value_type(c.read<uint32_t>(field), what, key, at);
  TS_CHECK(elem != GgufType::Array, what, ": key '", key, "' is an array of arrays (at byte ", at,
           "), which Tessera does not read");
  const uint64_t n = c.read<uint64_t>(field);
  TS_CHECK(n <= c.left() / min_bytes(elem), what, ": key '", key, "' claims ", n, " elements of ", gguf_type_name(elem),
           " at byte ", at, ", more than the ", c.left(), " bytes left can hold");
  elements += n;
  TS_CHECK(elements <= kMaxArrayElements, what, ": the metadata's arrays hold more than ", kMaxArrayElements,
           " elements in all (key '", key, "' at byte ", at, ")");
  if (is_integer(elem) || elem == GgufType::Bool) {
    std::vector<int64_t> v(n);
    for (auto& x : v) x = elem == GgufType::Bool ? read_bool(c, what, key) : read_integer(c, elem, field);
    return GgufValue::integers(elem, std::move(v));
  }
  if (elem == GgufType::F32 || elem == GgufType::F64) {
    std::vector<double> v(n);
    for (auto& x : v) x = elem == GgufType::F32 ? c.read<float>(field) : c.read<double>(field);
    return GgufValue::floats(elem, std::move(v));
  }
  std::vector<std::string> v(n);
  for (auto& s : v) s = c.string(field);
  return GgufValue::strings(std::move(v));
}

std::string quoted(const std::string& s, size_t max_chars) {
  std::string out = "\"";
  for (unsigned char ch : s.substr(0, max_chars)) {
    if (ch == '\n') out += "\\n";
    else if (ch == '"' || ch == '\\') out += std::string("\\") + static_cast<char>(ch);
    else if (ch < 0x20) out += "\\x" + std::string(1, "0123456789abcdef"[ch >> 4]) + "0123456789abcdef"[ch & 15];
    else out += static_cast<char>(ch);
  }
  return out + (s.size() > max_chars ? "\"..." : "\"");
}

std::string number(GgufType t, int64_t i, double f) {
  if (t == GgufType::U64) return std::to_string(static_cast<uint64_t>(i));
  if (is_integer(t)) return std::to_string(i);
  if (t == GgufType::Bool) return i ? "true" : "false";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", f);
  return buf;
}

}  // namespace

// ---- types ------------------------------------------------------------------

const char* ggml_type_name(GgmlType t) { return ggml_any_type_name(static_cast<uint32_t>(t)); }

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (GgmlType t : kGgmlTypes) {
    const std::string_view n = ggml_type_name(t);
    if (n.size() == name.size() &&
        std::equal(n.begin(), n.end(), name.begin(),
                   [](char a, char b) { return a == std::toupper(static_cast<unsigned char>(b)); }))
      return t;
  }
  return std::nullopt;
}

int64_t ggml_block_size(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q8_0: return 32;
    case GgmlType::Q4_K: case GgmlType::Q6_K: return 256;
    default: return 1;
  }
}

int64_t ggml_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 4;
    case GgmlType::F16: case GgmlType::BF16: return 2;
    case GgmlType::Q4_0: return 18;   // f16 scale, 16 bytes of 4-bit codes
    case GgmlType::Q8_0: return 34;   // f16 scale, 32 int8 codes
    case GgmlType::Q4_K: return 144;  // f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of codes
    case GgmlType::Q6_K: return 210;  // 128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8 scales, f16 d
  }
  TS_ERROR("GGUF: unknown ggml type ", static_cast<uint32_t>(t));
}

int64_t ggml_row_bytes(GgmlType t, int64_t n) {
  TS_CHECK(n % ggml_block_size(t) == 0, "GGUF: a row of ", n, " elements is not a whole number of ", ggml_type_name(t),
           " blocks of ", ggml_block_size(t));
  return n / ggml_block_size(t) * ggml_block_bytes(t);
}

int64_t ggml_file_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q4_K: return 14;  // llama.cpp's "Q4_K - Small"
    case GgmlType::Q6_K: return 18;
    case GgmlType::BF16: return 32;
    default: TS_ERROR("GGUF: weights can be written as F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K, not ", ggml_type_name(t));
  }
}

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

// ---- values -----------------------------------------------------------------

namespace {
// Whether v fits an integer type (a U64 is given as its bit pattern: any v).
bool fits(GgufType t, int64_t v) {
  switch (t) {
    case GgufType::U8: case GgufType::Bool: return v >= 0 && v <= 0xFF;
    case GgufType::I8: return v >= -128 && v <= 127;
    case GgufType::U16: return v >= 0 && v <= 0xFFFF;
    case GgufType::I16: return v >= -32768 && v <= 32767;
    case GgufType::U32: return v >= 0 && v <= 0xFFFFFFFFll;
    case GgufType::I32: return v >= INT32_MIN && v <= INT32_MAX;
    default: return true;
  }
}
}  // namespace

GgufValue GgufValue::integer(GgufType type, int64_t v) {
  TS_CHECK(is_integer(type), "GgufValue::integer: ", gguf_type_name(type), " is not an integer type");
  TS_CHECK(fits(type, v), "GgufValue::integer: ", v, " does not fit ", gguf_type_name(type));
  GgufValue x;
  x.type_ = type;
  x.i_ = v;
  return x;
}
GgufValue GgufValue::floating(GgufType type, double v) {
  TS_CHECK(type == GgufType::F32 || type == GgufType::F64, "GgufValue::floating: ", gguf_type_name(type),
           " is not f32 or f64");
  GgufValue x;
  x.type_ = type;
  x.f_ = v;
  return x;
}
GgufValue GgufValue::boolean(bool v) {
  GgufValue x;
  x.type_ = GgufType::Bool;
  x.i_ = v;
  return x;
}
GgufValue GgufValue::string(std::string v) {
  GgufValue x;
  x.type_ = GgufType::String;
  x.s_ = std::move(v);
  return x;
}
GgufValue GgufValue::integers(GgufType elem, std::vector<int64_t> v) {
  TS_CHECK(is_integer(elem) || elem == GgufType::Bool, "GgufValue::integers: ", gguf_type_name(elem),
           " is not an integer type");
  for (int64_t x : v) TS_CHECK(fits(elem, x), "GgufValue::integers: ", x, " does not fit ", gguf_type_name(elem));
  GgufValue x;
  x.type_ = GgufType::Array;
  x.elem_ = elem;
  x.ints_ = std::move(v);
  return x;
}
GgufValue GgufValue::floats(GgufType elem, std::vector<double> v) {
  TS_CHECK(elem == GgufType::F32 || elem == GgufType::F64, "GgufValue::floats: ", gguf_type_name(elem),
           " is not f32 or f64");
  GgufValue x;
  x.type_ = GgufType::Array;
  x.elem_ = elem;
  x.floats_ = std::move(v);
  return x;
}
GgufValue GgufValue::bools(std::vector<bool> v) { return integers(GgufType::Bool, std::vector<int64_t>(v.begin(), v.end())); }
GgufValue GgufValue::strings(std::vector<std::string> v) {
  GgufValue x;
  x.type_ = GgufType::Array;
  x.elem_ = GgufType::String;
  x.strings_ = std::move(v);
  return x;
}

size_t GgufValue::size() const {
  if (!is_array()) return 1;
  return elem_ == GgufType::String ? strings_.size() : (elem_ == GgufType::F32 || elem_ == GgufType::F64) ? floats_.size() : ints_.size();
}

std::string GgufValue::type_str() const {
  return is_array() ? "array[" + std::string(gguf_type_name(elem_)) + "]" : gguf_type_name(type_);
}

void rethrow_naming_file(const std::string& what, const Error& e) {
  if (dynamic_cast<const OutOfMemoryError*>(&e) || dynamic_cast<const InternalError*>(&e) ||
      std::string_view(e.what()).find(what) != std::string_view::npos)
    throw;
  throw Error(what + ": " + e.what());
}

int64_t GgufValue::as_int(std::string_view what) const {
  TS_CHECK(is_integer(type_), "GGUF: ", what, " is ", type_str(), ", not an integer");
  TS_CHECK(type_ != GgufType::U64 || i_ >= 0, "GGUF: ", what, " = ", static_cast<uint64_t>(i_), " is too large");
  return i_;
}
uint64_t GgufValue::as_uint(std::string_view what) const {
  TS_CHECK(is_integer(type_), "GGUF: ", what, " is ", type_str(), ", not an integer");
  TS_CHECK(type_ == GgufType::U64 || i_ >= 0, "GGUF: ", what, " = ", i_, " is negative");
  return static_cast<uint64_t>(i_);
}
double GgufValue::as_float(std::string_view what) const {
  if (is_integer(type_)) return type_ == GgufType::U64 ? static_cast<double>(static_cast<uint64_t>(i_)) : static_cast<double>(i_);
  TS_CHECK(type_ == GgufType::F32 || type_ == GgufType::F64, "GGUF: ", what, " is ", type_str(), ", not a number");
  return f_;
}
bool GgufValue::as_bool(std::string_view what) const {
  TS_CHECK(type_ == GgufType::Bool, "GGUF: ", what, " is ", type_str(), ", not a bool");
  return i_ != 0;
}
const std::string& GgufValue::as_string(std::string_view what) const {
  TS_CHECK(type_ == GgufType::String, "GGUF: ", what, " is ", type_str(), ", not a string");
  return s_;
}
const std::vector<int64_t>& GgufValue::as_ints(std::string_view what) const {
  TS_CHECK(is_array() && (is_integer(elem_) || elem_ == GgufType::Bool), "GGUF: ", what, " is ", type_str(),
           ", not an array of integers");
  return ints_;
}
const std::vector<double>& GgufValue::as_floats(std::string_view what) const {
  TS_CHECK(is_array() && (elem_ == GgufType::F32 || elem_ == GgufType::F64), "GGUF: ", what, " is ", type_str(),
           ", not an array of floats");
  return floats_;
}
const std::vector<std::string>& GgufValue::as_strings(std::string_view what) const {
  TS_CHECK(is_array() && elem_ == GgufType::String, "GGUF: ", what, " is ", type_str(), ", not an array of strings");
  return strings_;
}

std::string GgufValue::summary(size_t max_chars) const {
  if (type_ == GgufType::String) return quoted(s_, max_chars);
  if (!is_array()) return number(type_, i_, f_);
  std::string out = "[";
  const size_t n = size();
  for (size_t i = 0; i < n; ++i) {
    std::string item = elem_ == GgufType::String                                 ? quoted(strings_[i], 24)
                       : (elem_ == GgufType::F32 || elem_ == GgufType::F64) ? number(elem_, 0, floats_[i])
                                                                                 : number(elem_, ints_[i], 0);
    if (out.size() + item.size() + 2 > max_chars) {
      out += "...";
      break;
    }
    out += (i ? ", " : "") + item;
  }
  return out + "] (" + std::to_string(n) + ")";
}

// ---- tensors ----------------------------------------------------------------

Shape GgufTensorInfo::shape() const {
  Shape s;
  for (auto it = ne.rbegin(); it != ne.rend(); ++it) s.push_back(*it);
  return s;
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

// ---- reading ----------------------------------------------------------------

bool is_gguf_file(const std::string& path) {
  std::FILE* fp = std::fopen(path.c_str(), "rb");
  if (!fp) return false;
  char magic[4] = {};
  const bool gguf = std::fread(magic, 1, 4, fp) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
  std::fclose(fp);
  return gguf;
}

GgufFile GgufFile::open(const std::string& path) {
  auto m = io::map_file(path);
  GgufFile f;
  f.data_ = m->data;
  f.size_ = m->size;
  f.keep_ = m;
  f.mapped_ = true;
  f.what_ = path;
  f.parse_all();
  return f;
}

void GgufFile::release(const char* p, size_t n) const {
  if (!mapped_ || n == 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  TS_CHECK(p >= data_ && p + n <= data_ + size_, "GgufFile::release: the range is not in ", what_);
  // Advice only: the mapping is private and never written, so dropped pages
  // read back from the file unchanged; a failure just keeps them.
  if (b > a) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

GgufFile GgufFile::parse(const char* data, size_t size, const std::string& what) {
  // 64-byte aligned, as a mapping is page-aligned, so views of f32 data work.
  auto buf = std::shared_ptr<char[]>(new (std::align_val_t{64}) char[size + 1], [](char* p) {
    ::operator delete[](p, std::align_val_t{64});
  });
  if (size) std::memcpy(buf.get(), data, size);
  GgufFile f;
  f.data_ = buf.get();
  f.size_ = size;
  f.keep_ = std::shared_ptr<const void>(buf, buf.get());
  f.what_ = what;
  f.parse_all();
  return f;
}

void GgufFile::parse_all() {
  const std::string& what = what_;
  Cursor c(data_, size_, what);
  TS_CHECK(size_ >= 4 && std::memcmp(data_, kMagic, 4) == 0, what, ": not a GGUF file (it does not start with "
           "\"GGUF\")");
  c.read<uint32_t>("the magic");
  version_ = c.read<uint32_t>("the version");
  TS_CHECK(version_ != 1, what, ": GGUF version 1 (32-bit counts) is not supported; convert the model again with a "
           "current llama.cpp");
  TS_CHECK(version_ == 2 || version_ == 3, what, ": GGUF version ", version_, " is not supported (2 and 3 are)");
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_kv = c.read<uint64_t>("the metadata count");
  // A key/value takes at least 13 bytes (length, one byte of key, type, a
  // byte of value), a tensor info 33: counts beyond that are lies.
  TS_CHECK(n_kv <= c.left() / 13, what, ": the header claims ", n_kv, " metadata entries, more than the ", c.left(),
           " bytes left can hold");
  TS_CHECK(n_tensors <= c.left() / 33, what, ": the header claims ", n_tensors, " tensors, more than the ", c.left(),
           " bytes left can hold");

  std::set<std::string, std::less<>> keys;
  uint64_t array_elements = 0;
  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t at = c.pos();
    std::string key = c.string("metadata key " + std::to_string(i));
    TS_CHECK(!key.empty() && key.size() <= kMaxKey, what, ": metadata key ", i, " at byte ", at, " is ",
             key.empty() ? "empty" : "longer than 65535 bytes");
    TS_CHECK(keys.insert(key).second, what, ": metadata key '", key, "' appears twice (again at byte ", at, ")");
    const size_t type_at = c.pos();
    const GgufType t = value_type(c.read<uint32_t>("the type of '" + key + "'"), what, key, type_at);
    GgufValue v = read_value(c, t, what, key, array_elements);
    kv_.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = find("general.alignment")) {
    TS_CHECK(a->type() == GgufType::U32, what, ": general.alignment is ", a->type_str(), " (must be u32)");
    alignment_ = a->as_uint();
    TS_CHECK(alignment_ > 0 && (alignment_ & (alignment_ - 1)) == 0, what, ": general.alignment ", alignment_,
             " is not a power of two");
  }

  std::set<std::string, std::less<>> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const size_t at = c.pos();
    GgufTensorInfo t;
    t.name = c.string("the name of tensor " + std::to_string(i));
    TS_CHECK(!t.name.empty() && t.name.size() <= kMaxTensorName, what, ": tensor ", i, " at byte ", at, " has ",
             t.name.empty() ? "an empty name" : "a name longer than 63 bytes");
    TS_CHECK(names.insert(t.name).second, what, ": tensor name '", t.name, "' appears twice (again at byte ", at, ")");
    const std::string field = "tensor '" + t.name + "'";
    const uint32_t n_dims = c.read<uint32_t>(field);
    TS_CHECK(n_dims >= 1 && n_dims <= kMaxDims, what, ": ", field, " has ", n_dims, " dimensions (1 to 4)");
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t n = c.read<uint64_t>(field);
      TS_CHECK(n <= static_cast<uint64_t>(kMaxElements) && (n == 0 || numel <= kMaxElements / static_cast<int64_t>(n)),
               what, ": ", field, " has dimensions too large to address (dimension ", d, " is ", n, ")");
      t.ne.push_back(static_cast<int64_t>(n));
      numel *= static_cast<int64_t>(n);
    }
    const size_t type_at = c.pos();
    const uint32_t type = c.read<uint32_t>(field);
    if (!known_ggml_type(type)) {
      const char* name = ggml_any_type_name(type);
      TS_ERROR(what, ": ", field, " has ggml type ", type, name ? std::string(" (") + name + ")" : std::string(),
               " at byte ", type_at, ", which Tessera does not read (it reads ", supported_types(), ")");
    }
    t.type = static_cast<GgmlType>(type);
    TS_CHECK(t.ne[0] % ggml_block_size(t.type) == 0, what, ": ", field, " is ", ggml_type_name(t.type),
             " with rows of ", t.ne[0], " elements, not a whole number of blocks of ", ggml_block_size(t.type));
    t.nbytes = static_cast<uint64_t>(numel / ggml_block_size(t.type)) * static_cast<uint64_t>(ggml_block_bytes(t.type));
    t.offset = c.read<uint64_t>(field);
    TS_CHECK(t.offset % alignment_ == 0, what, ": ", field, " has data offset ", t.offset,
             ", not a multiple of the alignment ", alignment_);
    tensors_.push_back(std::move(t));
  }

  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (tensors_.empty()) return;
  TS_CHECK(data_offset_ <= size_, what, ": the data section would start at byte ", data_offset_, ", past the end of "
           "the ", size_, "-byte file (truncated?)");
  const uint64_t data_size = size_ - data_offset_;
  std::vector<const GgufTensorInfo*> order;  // the tensors with bytes (an empty one may share an offset)
  for (const auto& t : tensors_) {
    TS_CHECK(t.offset <= data_size && t.nbytes <= data_size - t.offset, what, ": tensor '", t.name, "' (",
             ggml_type_name(t.type), ", ", t.nbytes, " bytes at data offset ", t.offset, ") runs past the end of the ",
             data_size, "-byte data section (truncated?)");
    if (t.nbytes > 0) order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i)
    TS_CHECK(order[i]->offset >= order[i - 1]->offset + order[i - 1]->nbytes, what, ": tensors '", order[i - 1]->name,
             "' and '", order[i]->name, "' overlap in the data section");
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* v = find(key);
  TS_CHECK(v != nullptr, what_, ": the metadata has no key '", key, "'");
  return *v;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const GgufTensorInfo& GgufFile::tensor_info(std::string_view name) const {
  const GgufTensorInfo* t = find_tensor(name);
  TS_CHECK(t != nullptr, what_, ": no tensor named '", name, "'");
  return *t;
}

Tensor GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo& t = tensor_info(name);
  const char* p = tensor_data(t);
  Shape shape = t.shape();
  DType dtype = DType::U8;
  switch (t.type) {
    case GgmlType::F32: dtype = DType::F32; break;
    case GgmlType::F16: dtype = DType::F16; break;
    case GgmlType::BF16: dtype = DType::BF16; break;
    default: {
      const int64_t row = ggml_row_bytes(t.type, t.ne[0]);
      shape = {t.ne[0] == 0 ? 0 : t.numel() / t.ne[0], row};
    }
  }
  if (t.nbytes == 0 || reinterpret_cast<uintptr_t>(p) % dtype_size(dtype) != 0) return from_buffer(p, shape, dtype);
  auto keep = keep_;
  return from_blob(const_cast<char*>(p), shape, dtype, [keep](void*) {});
}

// ---- writing ----------------------------------------------------------------

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  TS_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "GgufWriter: alignment ", alignment,
           " is not a power of two");
  if (alignment != 32) set("general.alignment", GgufValue::integer(GgufType::U32, alignment));
}

void GgufWriter::set(const std::string& key, GgufValue v) {
  TS_CHECK(!key.empty() && key.size() <= kMaxKey, "GgufWriter: a key must be 1 to 65535 bytes");
  TS_CHECK(key != "general.alignment" || (v.type() == GgufType::U32 && v.as_uint() == alignment_),
           "GgufWriter: general.alignment follows the writer's alignment (", alignment_, "); give it to the "
           "constructor instead");
  for (auto& [k, old] : kv_)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, const Tensor& t) {
  TS_CHECK(t.defined(), "GgufWriter: tensor '", name, "' is undefined");
  GgmlType type = GgmlType::F32;
  switch (t.dtype()) {
    case DType::F32: type = GgmlType::F32; break;
    case DType::F16: type = GgmlType::F16; break;
    case DType::BF16: type = GgmlType::BF16; break;
    default: TS_ERROR("GgufWriter: tensor '", name, "' is ", dtype_name(t.dtype()), "; write F32, F16 or BF16 "
                      "tensors, or quantized blocks with their ggml type");
  }
  TS_CHECK(t.dim() >= 1 && t.dim() <= static_cast<int64_t>(kMaxDims), "GgufWriter: tensor '", name, "' has ",
           t.dim(), " dimensions (1 to 4)");
  std::vector<int64_t> ne(t.shape().begin(), t.shape().end());
  std::reverse(ne.begin(), ne.end());
  Tensor c = t.contiguous();
  add_tensor(name, type, std::move(ne), from_blob(c.raw_data(), {static_cast<int64_t>(c.nbytes())}, DType::U8,
                                                  [c](void*) {}));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, const Tensor& data) {
  TS_CHECK(!name.empty() && name.size() <= kMaxTensorName, "GgufWriter: tensor name '", name,
           "' must be 1 to 63 bytes");
  for (const auto& e : tensors_) TS_CHECK(e.info.name != name, "GgufWriter: tensor '", name, "' added twice");
  TS_CHECK(!ne.empty() && ne.size() <= kMaxDims, "GgufWriter: tensor '", name, "' has ", ne.size(),
           " dimensions (1 to 4)");
  GgufTensorInfo info;
  info.name = name;
  info.ne = std::move(ne);
  info.type = type;
  for (int64_t d : info.ne) TS_CHECK(d >= 0, "GgufWriter: tensor '", name, "' has a negative dimension");
  info.nbytes = static_cast<uint64_t>(info.numel() / ggml_block_size(type) * ggml_block_bytes(type));
  TS_CHECK(info.ne[0] % ggml_block_size(type) == 0, "GgufWriter: tensor '", name, "' (", ggml_type_name(type),
           ") has rows of ", info.ne[0], " elements, not a whole number of blocks of ", ggml_block_size(type));
  TS_CHECK(data.defined() && data.dtype() == DType::U8 && data.nbytes() == info.nbytes, "GgufWriter: tensor '", name,
           "' needs ", info.nbytes, " bytes of ", ggml_type_name(type), " data, got ",
           data.defined() ? std::to_string(data.nbytes()) + " " + dtype_name(data.dtype()) : std::string("none"));
  uint64_t offset = 0;
  if (!tensors_.empty()) {
    const GgufTensorInfo& last = tensors_.back().info;
    offset = (last.offset + last.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  info.offset = offset;
  tensors_.push_back({std::move(info), data.contiguous()});
}

namespace {

template <typename Emit>
void emit_value(const Emit& emit, const GgufValue& v) {
  auto put = [&](auto x) { emit(&x, sizeof x); };
  auto put_string = [&](const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    emit(s.data(), s.size());
  };
  auto put_int = [&](GgufType t, int64_t i) {
    switch (t) {
      case GgufType::U8: case GgufType::Bool: put(static_cast<uint8_t>(i)); break;
      case GgufType::I8: put(static_cast<int8_t>(i)); break;
      case GgufType::U16: put(static_cast<uint16_t>(i)); break;
      case GgufType::I16: put(static_cast<int16_t>(i)); break;
      case GgufType::U32: put(static_cast<uint32_t>(i)); break;
      case GgufType::I32: put(static_cast<int32_t>(i)); break;
      default: put(i); break;  // U64 (its bit pattern) and I64
    }
  };
  auto put_float = [&](GgufType t, double f) {
    if (t == GgufType::F32) put(static_cast<float>(f));
    else put(f);
  };
  put(static_cast<uint32_t>(v.type()));
  if (!v.is_array()) {
    if (v.type() == GgufType::String) put_string(v.as_string());
    else if (v.type() == GgufType::F32 || v.type() == GgufType::F64) put_float(v.type(), v.as_float());
    else put_int(v.type(), v.raw_integer());
    return;
  }
  put(static_cast<uint32_t>(v.elem_type()));
  put(static_cast<uint64_t>(v.size()));
  if (v.elem_type() == GgufType::String)
    for (const auto& s : v.as_strings()) put_string(s);
  else if (v.elem_type() == GgufType::F32 || v.elem_type() == GgufType::F64)
    for (double f : v.as_floats()) put_float(v.elem_type(), f);
  else
    for (int64_t i : v.as_ints()) put_int(v.elem_type(), i);
}

}  // namespace

template <typename Emit>
static void write_gguf(const Emit& emit, uint32_t alignment, const std::vector<std::pair<std::string, GgufValue>>& kv,
                       const std::vector<std::pair<const GgufTensorInfo*, const Tensor*>>& tensors) {
  uint64_t pos = 0;
  auto out = [&](const void* p, size_t n) {
    emit(p, n);
    pos += n;
  };
  auto put = [&](auto x) { out(&x, sizeof x); };
  auto put_string = [&](const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    out(s.data(), s.size());
  };
  auto pad = [&] {
    static const char zeros[256] = {};
    while (pos % alignment) out(zeros, std::min<uint64_t>(alignment - pos % alignment, sizeof zeros));
  };
  out(kMagic, 4);
  put(uint32_t{3});
  put(static_cast<uint64_t>(tensors.size()));
  put(static_cast<uint64_t>(kv.size()));
  for (const auto& [k, v] : kv) {
    put_string(k);
    emit_value(out, v);
  }
  for (const auto& [info, data] : tensors) {
    put_string(info->name);
    put(static_cast<uint32_t>(info->ne.size()));
    for (int64_t d : info->ne) put(static_cast<uint64_t>(d));
    put(static_cast<uint32_t>(info->type));
    put(info->offset);
  }
  pad();
  for (const auto& [info, data] : tensors) {
    out(data->raw_data(), data->nbytes());
    pad();
  }
}

std::string GgufWriter::bytes() const {
  std::string s;
  std::vector<std::pair<const GgufTensorInfo*, const Tensor*>> ts;
  for (const auto& e : tensors_) ts.push_back({&e.info, &e.data});
  write_gguf([&](const void* p, size_t n) { s.append(static_cast<const char*>(p), n); }, alignment_, kv_, ts);
  return s;
}

void GgufWriter::save(const std::string& path) const {
  std::vector<std::pair<const GgufTensorInfo*, const Tensor*>> ts;
  for (const auto& e : tensors_) ts.push_back({&e.info, &e.data});
  io::write_file_atomic(path, [&](io::Writer& w) {
    write_gguf([&](const void* p, size_t n) { w.write(p, n); }, alignment_, kv_, ts);
  });
}

}  // namespace tessera::llm
