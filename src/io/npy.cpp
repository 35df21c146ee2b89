#include "tessera/io/npy.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>

#include "tessera/io/file.h"

namespace tessera::io {

static_assert(std::endian::native == std::endian::little, ".npy data is read as little-endian");

namespace {

struct Descr {
  const char* code;
  DType dtype;
};
constexpr Descr kDescrs[] = {{"|b1", DType::Bool}, {"|u1", DType::U8},  {"|i1", DType::I8},  {"<i4", DType::I32},
                             {"<i8", DType::I64},  {"<f2", DType::F16}, {"<f4", DType::F32}, {"<f8", DType::F64}};

// A tiny parser for the header's Python dict literal: string keys; values are
// strings, True/False, or tuples of non-negative integers.
class HeaderParser {
 public:
  HeaderParser(const std::string& s, const std::string& what) : s_(s), what_(what) {}
  void parse(std::string& descr, bool& fortran, Shape& shape) {
    bool has_descr = false, has_order = false, has_shape = false;
    skip();
    expect('{');
    for (;;) {
      skip();
      if (peek() == '}') break;
      std::string key = string();
      skip();
      expect(':');
      skip();
      if (key == "descr") {
        descr = string();
        has_descr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        has_order = true;
      } else if (key == "shape") {
        shape = tuple();
        has_shape = true;
      } else {
        fail("unknown header key '" + key + "' (expected descr, fortran_order, shape)");
      }
      skip();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}'");
      break;
    }
    ++i_;
    if (!has_descr || !has_order || !has_shape) fail("the header must have 'descr', 'fortran_order' and 'shape'");
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    TS_ERROR(what_, ": invalid .npy header at character ", i_, ": ", msg, " (header: ", s_.substr(0, 200), ")");
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string() {
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    if (s_.compare(i_, 4, "True") == 0) return i_ += 4, true;
    if (s_.compare(i_, 5, "False") == 0) return i_ += 5, false;
    fail("expected True or False");
  }
  Shape tuple() {
    expect('(');
    Shape out;
    for (;;) {
      skip();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a non-negative integer in the shape");
      uint64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        v = v * 10 + static_cast<uint64_t>(s_[i_++] - '0');
        if (v > (uint64_t(1) << 48)) fail("shape dimension too large");
      }
      out.push_back(static_cast<int64_t>(v));
      if (out.size() > 16) fail("more than 16 dimensions");
      skip();
      if (peek() == ',') ++i_;
      else if (peek() != ')') fail("expected ',' or ')' in the shape");
    }
    ++i_;
    return out;
  }
  const std::string& s_;
  std::string what_;
  size_t i_ = 0;
};

}  // namespace

Tensor parse_npy(const char* data, size_t size, const std::string& what) {
  TS_CHECK(size >= 10 && std::memcmp(data, "\x93NUMPY", 6) == 0, what, ": not a .npy file (missing the \\x93NUMPY "
           "magic)");
  const int major = static_cast<unsigned char>(data[6]);
  TS_CHECK(major >= 1 && major <= 3, what, ": unsupported .npy format version ", major, " (supported: 1, 2, 3)");
  size_t header_len, start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(data[8]) | (static_cast<size_t>(static_cast<unsigned char>(data[9])) << 8);
    start = 10;
  } else {
    TS_CHECK(size >= 12, what, ": truncated header");
    uint32_t n;
    std::memcpy(&n, data + 8, 4);
    header_len = n;
    start = 12;
  }
  TS_CHECK(header_len <= size - start, what, ": header length ", header_len, " runs past the end of the ", size,
           "-byte file (truncated?)");
  std::string header(data + start, header_len);
  std::string descr;
  bool fortran = false;
  Shape shape;
  HeaderParser(header, what).parse(descr, fortran, shape);
  DType dtype = DType::F32;
  bool known = false;
  for (auto& d : kDescrs)
    if (descr == d.code || (descr.size() == 3 && descr[0] == '=' && descr.substr(1) == std::string(d.code + 1)))
      dtype = d.dtype, known = true;
  TS_CHECK(known, what, ": unsupported dtype '", descr, "' (supported: |b1 |u1 |i1 <i4 <i8 <f2 <f4 <f8; "
           "big-endian data must be converted first)");
  // Bound the product of the non-zero dims too: strides are computed over them.
  uint64_t numel = 1, extent = 1;
  for (int64_t d : shape) {
    const uint64_t e = std::max<uint64_t>(static_cast<uint64_t>(d), 1);
    TS_CHECK(extent <= (uint64_t(1) << 48) / e, what, ": shape ", shape_str(shape), " is too large");
    extent *= e;
    numel *= static_cast<uint64_t>(d);
  }
  const size_t body = start + header_len;
  const uint64_t need = numel * dtype_size(dtype);
  TS_CHECK(size - body == need, what, ": ", descr, " ", shape_str(shape), " needs ", need, " data bytes, the file has ",
           size - body, size - body < need ? " (truncated?)" : " (trailing bytes)");
  if (dtype == DType::Bool)  // a byte other than 0 or 1 is not a bool (and would be undefined behaviour)
    for (uint64_t i = 0; i < numel; ++i)
      TS_CHECK(static_cast<unsigned char>(data[body + i]) <= 1, what, ": bool element ", i, " holds byte value ",
               static_cast<int>(static_cast<unsigned char>(data[body + i])), " (must be 0 or 1)");
  if (!fortran) return from_buffer(data + body, shape, dtype);
  // Fortran order: the data is the transpose of the reversed shape.
  Shape rev;
  for (size_t i = shape.size(); i-- > 0;) rev.push_back(shape[i]);
  Tensor t = from_buffer(data + body, rev, dtype);
  Shape perm;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) perm.push_back(i);
  return t.permute(perm).contiguous();
}

Tensor load_npy(const std::string& path) {
  std::vector<char> buf = read_file(path);
  return parse_npy(buf.data(), buf.size(), path);
}

std::string npy_bytes(const Tensor& t) {
  const char* descr = nullptr;
  for (auto& d : kDescrs)
    if (d.dtype == t.dtype()) descr = d.code;
  TS_CHECK(descr, "save_npy: dtype ", dtype_name(t.dtype()), " has no .npy equivalent");
  std::string shape = "(";
  for (int64_t d : t.shape()) shape += std::to_string(d) + ", ";
  if (t.dim() > 1) shape.resize(shape.size() - 2);
  else if (t.dim() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  out += h;
  Tensor c = t.contiguous();
  out.append(static_cast<const char*>(c.raw_data()), c.nbytes());
  return out;
}

void save_npy(const std::string& path, const Tensor& t) {
  std::string bytes = npy_bytes(t);
  write_file_atomic(path, [&](Writer& w) { w.write(bytes); });
}

}  // namespace tessera::io
