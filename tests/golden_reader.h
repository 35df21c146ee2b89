#pragma once
// Reader for tests/golden/ops.bin, the PyTorch reference data written by
// tests/golden/generate.py. The format is in tests/golden/README.md. The file
// is checked as it is read: a truncated or malformed file is an error naming
// the offset, never a read past the end.
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::golden {

static_assert(std::endian::native == std::endian::little, "ops.bin is little-endian");

// One case: an op run on one dtype with one set of arguments.
struct Case {
  std::string op, dtype, name;     // key prefix "op/dtype/name"
  std::string call;                // the PyTorch expression that produced it
  TensorList inputs;               // in0, in1, ...
  TensorList outputs;              // out0, out1, ...
  std::map<int, Tensor> v;         // output index -> the v of sum(out * v)
  std::map<int, Tensor> grads;     // input index -> d sum(out * v) / d input
  std::string key() const { return op + "/" + dtype + "/" + name; }
};

namespace detail {

class Cursor {
 public:
  Cursor(const std::vector<char>& b) : b_(b) {}
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  const char* take(size_t n) {
    if (n > b_.size() - pos_)
      throw std::runtime_error("ops.bin: truncated at byte " + std::to_string(pos_) + " (wanted " +
                               std::to_string(n) + " more bytes)");
    const char* p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  size_t pos() const { return pos_; }
  bool done() const { return pos_ == b_.size(); }

 private:
  const std::vector<char>& b_;
  size_t pos_ = 0;
};

// "in12" -> ("in", 12); ("call", -1) for a name without digits.
inline std::pair<std::string, int> split_slot(const std::string& s) {
  size_t i = s.find_first_of("0123456789");
  if (i == std::string::npos) return {s, -1};
  return {s.substr(0, i), std::stoi(s.substr(i))};
}

inline void put(TensorList& list, int i, const Tensor& t) {
  if (static_cast<int>(list.size()) <= i) list.resize(i + 1);
  list[i] = t;
}

}  // namespace detail

constexpr uint8_t kTextRecord = 255;

// Reads every case, in file order.
inline std::vector<Case> load_cases(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path + " (run tests/golden/generate.py)");
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  detail::Cursor c(bytes);
  if (std::memcmp(c.take(8), "TSGOLD01", 8) != 0) throw std::runtime_error(path + ": bad magic");
  uint32_t version = c.get<uint32_t>();
  if (version != 1) throw std::runtime_error(path + ": unsupported version " + std::to_string(version));
  uint32_t count = c.get<uint32_t>();

  std::vector<Case> cases;
  std::map<std::string, size_t> index;  // key prefix -> position in `cases`
  for (uint32_t r = 0; r < count; ++r) {
    size_t at = c.pos();
    uint32_t klen = c.get<uint32_t>();
    if (klen > 4096) throw std::runtime_error("ops.bin: key too long at byte " + std::to_string(at));
    std::string key(c.take(klen), klen);
    uint8_t code = c.get<uint8_t>();
    uint32_t ndim = c.get<uint32_t>();
    if (ndim > 16) throw std::runtime_error("ops.bin: " + key + " has " + std::to_string(ndim) + " dims");
    std::vector<int64_t> dims(ndim);
    int64_t numel = 1;
    for (auto& d : dims) {
      d = c.get<int64_t>();
      if (d < 0 || d > (int64_t{1} << 28)) throw std::runtime_error("ops.bin: " + key + " has a bad dim");
      numel *= d;
    }
    size_t slash = key.rfind('/');
    if (slash == std::string::npos) throw std::runtime_error("ops.bin: bad key '" + key + "'");
    std::string prefix = key.substr(0, slash);
    auto [slot, i] = detail::split_slot(key.substr(slash + 1));
    auto it = index.find(prefix);
    if (it == index.end()) {
      size_t a = prefix.find('/'), b = prefix.rfind('/');
      if (a == std::string::npos || a == b) throw std::runtime_error("ops.bin: bad key '" + key + "'");
      Case k;
      k.op = prefix.substr(0, a);
      k.dtype = prefix.substr(a + 1, b - a - 1);
      k.name = prefix.substr(b + 1);
      it = index.emplace(prefix, cases.size()).first;
      cases.push_back(std::move(k));
    }
    Case& k = cases[it->second];
    if (code == kTextRecord) {
      if (ndim != 1) throw std::runtime_error("ops.bin: text record " + key + " must be 1-D");
      k.call.assign(c.take(static_cast<size_t>(dims[0])), static_cast<size_t>(dims[0]));
      continue;
    }
    if (code >= kNumDTypes) throw std::runtime_error("ops.bin: " + key + " has dtype code " + std::to_string(code));
    DType dt = static_cast<DType>(code);
    const char* data = c.take(static_cast<size_t>(numel) * dtype_size(dt));
    Tensor t = from_buffer(data, IntArrayRef(dims), dt);
    if (slot == "in" && i >= 0) detail::put(k.inputs, i, t);
    else if (slot == "out" && i >= 0) detail::put(k.outputs, i, t);
    else if (slot == "v" && i >= 0) k.v[i] = t;
    else if (slot == "grad" && i >= 0) k.grads[i] = t;
    else throw std::runtime_error("ops.bin: unknown record '" + key + "'");
  }
  if (!c.done()) throw std::runtime_error("ops.bin: " + std::to_string(bytes.size() - c.pos()) + " trailing bytes");
  return cases;
}

}  // namespace tessera::golden
