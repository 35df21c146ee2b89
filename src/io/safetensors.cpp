#include "tessera/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "io/json_excerpt.h"

namespace tessera::io {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

using nlohmann::json;
constexpr size_t kMaxHeader = 100u << 20;  // the specification's limit

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "BOOL";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F32: return "F32";
    case DType::F64: return "F64";
  }
  TS_ERROR("safetensors: unsupported dtype");
}

static DType dtype_from_name(const std::string& s, const std::string& tensor, const std::string& what) {
  for (DType t : {DType::Bool, DType::U8, DType::I8, DType::I32, DType::I64, DType::F16, DType::BF16, DType::F32,
                  DType::F64})
    if (s == safetensors_dtype_name(t)) return t;
  TS_ERROR(what, ": tensor '", tensor, "' has dtype '", s,
           "', which Tessera does not support (supported: BOOL, U8, I8, I32, I64, F16, BF16, F32, F64)");
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto m = map_file(path);
  SafetensorsFile f;
  f.data_ = m->data;
  f.size_ = m->size;
  f.keep_ = m;
  f.parse_header(path);
  return f;
}

SafetensorsFile SafetensorsFile::parse(const char* data, size_t size, const std::string& what) {
  auto buf = std::shared_ptr<char[]>(new char[size + 1]);
  if (size) std::memcpy(buf.get(), data, size);
  SafetensorsFile f;
  f.data_ = buf.get();
  f.size_ = size;
  f.keep_ = std::shared_ptr<const void>(buf, buf.get());
  f.parse_header(what);
  return f;
}

void SafetensorsFile::parse_header(const std::string& what) {
  TS_CHECK(size_ >= 8, what, ": file is ", size_, " bytes, too short for the 8-byte header length (not a "
           "safetensors file, or truncated)");
  uint64_t n;
  std::memcpy(&n, data_, 8);
  TS_CHECK(n <= kMaxHeader, what, ": header length ", n, " exceeds the 100 MB limit (not a safetensors file?)");
  TS_CHECK(n <= size_ - 8, what, ": header length ", n, " runs past the end of the ", size_,
           "-byte file (truncated?)");
  TS_CHECK(n >= 2 && data_[8] == '{', what, ": the header must be a JSON object starting with '{'");
  json h = json::parse(data_ + 8, data_ + 8 + n, nullptr, false);
  TS_CHECK(!h.is_discarded() && h.is_object(), what, ": the header (bytes 8..", 8 + n, ") is not valid JSON");
  const size_t base = 8 + static_cast<size_t>(n);
  const size_t data_size = size_ - base;

  struct Span {
    size_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      TS_CHECK(v.is_object(), what, ": __metadata__ must be an object of strings");
      for (auto& [k, s] : v.items()) {
        TS_CHECK(s.is_string(), what, ": __metadata__ value for '", k, "' must be a string");
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    TS_CHECK(v.is_object() && v.contains("dtype") && v["dtype"].is_string() && v.contains("shape") &&
                 v["shape"].is_array() && v.contains("data_offsets") && v["data_offsets"].is_array() &&
                 v["data_offsets"].size() == 2,
             what, ": tensor '", name, "' needs \"dtype\" (a string), \"shape\" (a list) and \"data_offsets\" "
             "([begin, end])");
    Entry e;
    e.dtype = dtype_from_name(v["dtype"].get<std::string>(), name, what);
    uint64_t numel = 1, extent = 1;  // extent: the product of the non-zero dims (strides use it)
    for (auto& d : v["shape"]) {
      TS_CHECK(d.is_number_unsigned(), what, ": tensor '", name, "' has a shape entry that is not a non-negative "
               "integer: ", io::json_excerpt(d));
      uint64_t dim = d.get<uint64_t>();
      const uint64_t nz = std::max<uint64_t>(dim, 1);
      TS_CHECK(nz <= (uint64_t(1) << 48) && extent <= (uint64_t(1) << 48) / nz, what, ": tensor '", name,
               "' has an impossibly large shape ", io::json_excerpt(v["shape"]));
      extent *= nz;
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    TS_CHECK(e.shape.size() <= 16, what, ": tensor '", name, "' has ", e.shape.size(), " dimensions (at most 16)");
    auto& off = v["data_offsets"];
    TS_CHECK(off[0].is_number_unsigned() && off[1].is_number_unsigned(), what, ": tensor '", name,
             "' has data_offsets that are not non-negative integers: ", io::json_excerpt(off));
    uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    TS_CHECK(b <= en && en <= data_size, what, ": tensor '", name, "' has data_offsets [", b, ", ", en,
             "] outside the ", data_size, "-byte data section (truncated?)");
    TS_CHECK(en - b == numel * dtype_size(e.dtype), what, ": tensor '", name, "' spans ", en - b, " bytes, but ",
             v["dtype"].get<std::string>(), " ", shape_str(e.shape), " needs ", numel * dtype_size(e.dtype));
    e.begin = base + b;
    e.end = base + en;
    spans.push_back({e.begin, e.end, name});
    entries_.emplace(name, std::move(e));
  }
  // The data section must be covered exactly: no holes, no overlaps.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  size_t pos = base;
  for (auto& s : spans) {
    TS_CHECK(s.begin == pos, what, ": tensor '", s.name, "' starts at data offset ", s.begin - base, " but the ",
             s.begin > pos ? "previous tensor ends" : "previous tensor overlaps it, ending", " at ", pos - base,
             " (the data must be covered without holes or overlaps)");
    pos = s.end;
    names_.push_back(s.name);
  }
  TS_CHECK(pos == size_, what, ": ", size_ - pos, " bytes after the last tensor are not part of any tensor");
}

Tensor SafetensorsFile::get(const std::string& name) const {
  auto it = entries_.find(name);
  TS_CHECK(it != entries_.end(), "safetensors: no tensor named '", name, "'");
  const Entry& e = it->second;
  const char* p = data_ + e.begin;
  if (e.dtype == DType::Bool)  // a byte other than 0 or 1 is not a bool (and would be undefined behaviour)
    for (size_t i = 0; i < e.end - e.begin; ++i)
      TS_CHECK(static_cast<unsigned char>(p[i]) <= 1, "safetensors: BOOL tensor '", name, "' element ", i,
               " holds byte value ", static_cast<int>(static_cast<unsigned char>(p[i])), " (must be 0 or 1)");
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(e.dtype) != 0 || e.begin == e.end)
    return from_buffer(p, e.shape, e.dtype);
  auto keep = keep_;
  return from_blob(const_cast<char*>(p), e.shape, e.dtype, [keep](void*) {});
}

NamedTensors SafetensorsFile::all() const {
  NamedTensors out;
  for (auto& n : names_) out.emplace_back(n, get(n));
  return out;
}

NamedTensors load_safetensors(const std::string& path, Metadata* metadata) {
  auto f = SafetensorsFile::open(path);
  if (metadata) *metadata = f.metadata();
  return f.all();
}

namespace {
std::string header_json(const NamedTensors& tensors, const Metadata& metadata, size_t& data_size) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::set<std::string> seen;
  size_t off = 0;
  for (auto& [name, t] : tensors) {
    TS_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    TS_CHECK(name != "__metadata__" && seen.insert(name).second, "save_safetensors: duplicate or reserved name '",
             name, "'");
    size_t n = t.nbytes();
    h[name] = {{"dtype", safetensors_dtype_name(t.dtype())}, {"shape", t.shape().vec()}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  data_size = off;
  std::string s = h.dump();
  s.append((8 - (8 + s.size()) % 8) % 8, ' ');  // align the data section to 8 bytes
  return s;
}

void write_all(Writer& w, const NamedTensors& tensors, const Metadata& metadata) {
  size_t data_size;
  std::string h = header_json(tensors, metadata, data_size);
  uint64_t n = h.size();
  w.write(&n, 8);
  w.write(h);
  for (auto& [name, t] : tensors) {
    Tensor c = t.contiguous();
    w.write(c.raw_data(), c.nbytes());
  }
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  write_file_atomic(path, [&](Writer& w) { write_all(w, tensors, metadata); });
}

std::string safetensors_bytes(const NamedTensors& tensors, const Metadata& metadata) {
  size_t data_size;
  std::string h = header_json(tensors, metadata, data_size);
  std::string out;
  uint64_t n = h.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += h;
  for (auto& [name, t] : tensors) {
    Tensor c = t.contiguous();
    out.append(static_cast<const char*>(c.raw_data()), c.nbytes());
  }
  return out;
}

}  // namespace tessera::io
