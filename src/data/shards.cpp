#include "tessera/data/shards.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <filesystem>
#include <regex>

#include "tessera/io/npy.h"

namespace tessera::data {

namespace {

constexpr size_t kBlock = 512;

uint64_t parse_octal(const char* p, size_t n, const std::string& what, const std::string& field) {
  uint64_t v = 0;
  size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    TS_CHECK(v < (uint64_t(1) << 60), what, ": tar header field '", field, "' is too large");
    v = v * 8 + static_cast<uint64_t>(p[i] - '0');
    any = true;
  }
  for (; i < n; ++i)
    TS_CHECK(p[i] == ' ' || p[i] == '\0', what, ": tar header field '", field, "' is not an octal number");
  TS_CHECK(any, what, ": tar header field '", field, "' is empty");
  return v;
}

void put_octal(char* dst, size_t width, uint64_t v) {  // width-1 digits and a NUL
  for (size_t i = width - 1; i-- > 0; v >>= 3) dst[i] = static_cast<char>('0' + (v & 7));
  dst[width - 1] = '\0';
}

std::string ustar_header(const std::string& name, uint64_t size, char type) {
  TS_CHECK(size < (uint64_t(1) << 33), "tar: file '", name, "' is larger than 8 GiB");
  std::string h(kBlock, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 99));
  put_octal(&h[100], 8, 0644);
  put_octal(&h[108], 8, 0);
  put_octal(&h[116], 8, 0);
  put_octal(&h[124], 12, size);
  put_octal(&h[136], 12, 0);
  h[156] = type;
  std::memcpy(&h[257], "ustar\0" "00", 8);
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  put_octal(&h[148], 7, sum);
  h[155] = ' ';
  return h;
}

std::string padded(const std::string& body) { return body + std::string((kBlock - body.size() % kBlock) % kBlock, '\0'); }

// A file's header; a name of 100 bytes or more goes first in a PAX extended
// header ("path" record), as POSIX tar, GNU tar and Python's tarfile write it.
std::string tar_header(const std::string& name, uint64_t size) {
  TS_CHECK(!name.empty(), "tar: a file name must not be empty");
  if (name.size() < 100) return ustar_header(name, size, '0');
  std::string record = " path=" + name + "\n";
  size_t len = record.size();
  while (std::to_string(len).size() + record.size() != len) len = std::to_string(len).size() + record.size();
  record = std::to_string(len) + record;  // the length counts itself
  return ustar_header("././@PaxHeader", record.size(), 'x') + padded(record) + ustar_header(name, size, '0');
}

// The "path" of a PAX extended header's records ("<len> <key>=<value>\n"),
// or empty; every record is checked against the header's bounds.
std::string pax_path(const char* p, size_t n, const std::string& what, size_t at) {
  std::string path;
  size_t i = 0;
  while (i < n && p[i] != '\0') {
    size_t len = 0, j = i;
    while (j < n && p[j] >= '0' && p[j] <= '9' && len < n) len = len * 10 + static_cast<size_t>(p[j++] - '0');
    TS_CHECK(j > i && j < n && p[j] == ' ' && len > j - i + 1 && len <= n - i && p[i + len - 1] == '\n', what,
             ": the PAX header at byte ", at, " has a malformed record (expected \"<length> <key>=<value>\\n\")");
    std::string_view rec(p + j + 1, i + len - 1 - (j + 1));
    size_t eq = rec.find('=');
    TS_CHECK(eq != std::string_view::npos, what, ": the PAX header at byte ", at, " has a record without '='");
    if (rec.substr(0, eq) == "path") path = std::string(rec.substr(eq + 1));
    i += len;
  }
  return path;
}

// "dir/000042.x.npy" -> ("dir/000042", "x.npy")
std::pair<std::string, std::string> split_key(const std::string& name) {
  size_t slash = name.rfind('/');
  size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

Tensor decode_field(const std::string& ext, const std::string& data, const std::string& what) {
  if (ext.ends_with("npy")) return io::parse_npy(data.data(), data.size(), what);
  if (ext.ends_with("cls")) {
    std::string s = data;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, 10);
    TS_CHECK(!s.empty() && *end == '\0' && errno == 0, what, ": a .cls field must hold a decimal integer, got '",
             s.substr(0, 40), "'");
    return scalar_tensor(static_cast<int64_t>(v), DType::I64);
  }
  TS_ERROR(what, ": no decoder for field extension '", ext, "' (supported: .npy, .cls)");
}

}  // namespace

std::vector<TarEntry> parse_tar(const char* data, size_t size, const std::string& what) {
  std::vector<TarEntry> out;
  size_t pos = 0;
  std::string long_name;  // from a GNU 'L' entry or a PAX "path", for the next file
  while (pos + kBlock <= size) {
    const char* h = data + pos;
    bool zero = std::all_of(h, h + kBlock, [](char c) { return c == 0; });
    if (zero) break;  // end-of-archive marker
    uint64_t chk = parse_octal(h + 148, 8, what, "checksum");
    unsigned sum = 0;
    for (size_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    TS_CHECK(chk == sum, what, ": tar header at byte ", pos, " has a bad checksum (corrupted?)");
    uint64_t fsize = parse_octal(h + 124, 12, what, "size");
    const size_t body = pos + kBlock;
    TS_CHECK(fsize <= size - body, what, ": the file at byte ", pos, " declares ", fsize,
             " bytes, past the end of the archive (truncated?)");
    const char type = h[156];
    const size_t next = body + (fsize + kBlock - 1) / kBlock * kBlock;
    if (type == 'L') {  // GNU long name: the body is the next file's name
      long_name.assign(data + body, strnlen(data + body, fsize));
      pos = next;
      continue;
    }
    if (type == 'x') {  // PAX extended header for the next file
      std::string p = pax_path(data + body, fsize, what, pos);
      if (!p.empty()) long_name = p;
      pos = next;
      continue;
    }
    std::string name(h, strnlen(h, 100));
    // The prefix field exists in POSIX ustar only ("ustar\0" "00"); old GNU
    // headers ("ustar  ") keep other data there.
    if (std::memcmp(h + 257, "ustar\0" "00", 8) == 0 && h[345] != '\0')
      name = std::string(h + 345, strnlen(h + 345, 155)) + "/" + name;
    if (!long_name.empty()) name = std::move(long_name);
    long_name.clear();
    // Regular files ('0', '\0', contiguous '7'); directories, links and
    // global headers ('g', 'K', ...) hold no sample data.
    if (type == '0' || type == '\0' || type == '7') out.push_back({name, std::string(data + body, fsize)});
    pos = next;
  }
  TS_CHECK(long_name.empty(), what, ": a long file name ('", long_name.substr(0, 60), "...') is not followed by its file");
  if (pos + kBlock <= size) return out;  // stopped at the end-of-archive marker
  TS_CHECK(pos == size || size - pos < kBlock, what, ": ends inside a tar header at byte ", pos);
  TS_CHECK(pos >= size, what, ": truncated (", size - pos, " stray bytes at the end)");
  return out;
}

// ---- writer ---------------------------------------------------------------------------------
ShardWriter::ShardWriter(std::string pattern, int64_t per_shard) : pattern_(std::move(pattern)), per_shard_(per_shard) {
  TS_CHECK(per_shard > 0, "ShardWriter: samples_per_shard must be positive");
  TS_CHECK(std::count(pattern_.begin(), pattern_.end(), '%') == 1, "ShardWriter: pattern '", pattern_,
           "' needs exactly one integer placeholder such as %06d");
}

ShardWriter::~ShardWriter() {
  try {
    close();
  } catch (...) {
  }
}

void ShardWriter::write(const std::string& key, const std::vector<std::pair<std::string, Tensor>>& fields) {
  TS_CHECK(!key.empty() && key.find('.') == std::string::npos, "ShardWriter: key '", key,
           "' must be non-empty and contain no '.'");
  for (auto& [ext, t] : fields) {
    std::string bytes;
    if (ext.ends_with("npy")) {
      bytes = io::npy_bytes(t);
    } else if (ext.ends_with("cls")) {
      TS_CHECK(t.numel() == 1 && !is_floating(t.dtype()), "ShardWriter: field '", ext, "' must be an integer scalar");
      bytes = std::to_string(t.item<int64_t>());
    } else {
      TS_ERROR("ShardWriter: unsupported field extension '", ext, "' (use .npy or .cls)");
    }
    buffer_ += tar_header(key + "." + ext, bytes.size());
    buffer_ += bytes;
    buffer_.append((kBlock - bytes.size() % kBlock) % kBlock, '\0');
  }
  if (++in_shard_ == per_shard_) flush();
}

void ShardWriter::flush() {
  if (in_shard_ == 0) return;
  char path[4096];
  std::snprintf(path, sizeof path, pattern_.c_str(), static_cast<int>(shards_.size()));
  buffer_.append(2 * kBlock, '\0');
  io::write_file_atomic(path, [&](io::Writer& w) { w.write(buffer_); });
  shards_.push_back(path);
  buffer_.clear();
  in_shard_ = 0;
}

void ShardWriter::close() { flush(); }

// ---- reader ---------------------------------------------------------------------------------
namespace {
uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t h = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

class ShardStream : public IterableDataset::Stream {
 public:
  ShardStream(std::vector<std::string> shards, std::vector<std::string> fields, int64_t buffer, uint64_t seed)
      : shards_(std::move(shards)), fields_(std::move(fields)), cap_(buffer), rng_(seed) {}

  std::optional<Example> next() override {
    for (;;) {
      if (cap_ <= 0) return read_one();
      while (static_cast<int64_t>(buffer_.size()) < cap_) {  // fill
        auto e = read_one();
        if (!e) break;
        buffer_.push_back(std::move(*e));
      }
      if (buffer_.empty()) return std::nullopt;
      size_t j = static_cast<size_t>(rand() % buffer_.size());
      std::swap(buffer_[j], buffer_.back());
      Example out = std::move(buffer_.back());
      buffer_.pop_back();
      return out;
    }
  }

 private:
  uint64_t rand() { return rng_ = mix(rng_, 0x5851f42d4c957f2dull); }

  std::optional<Example> read_one() {
    while (next_entry_ >= entries_.size()) {
      if (next_shard_ >= shards_.size()) return std::nullopt;
      path_ = shards_[next_shard_++];
      std::vector<char> buf = io::read_file(path_);
      entries_ = parse_tar(buf.data(), buf.size(), path_);
      next_entry_ = 0;
    }
    auto [key, ext0] = split_key(entries_[next_entry_].name);
    std::map<std::string, const std::string*> got;
    while (next_entry_ < entries_.size()) {
      auto [k, ext] = split_key(entries_[next_entry_].name);
      if (k != key) break;
      got[ext] = &entries_[next_entry_].data;
      ++next_entry_;
    }
    Example e;
    for (auto& f : fields_) {
      auto it = got.find(f);
      TS_CHECK(it != got.end(), path_, ": sample '", key, "' has no field '", f, "'");
      e.push_back(decode_field(f, *it->second, path_ + ":" + key + "." + f));
    }
    return e;
  }

  std::vector<std::string> shards_, fields_;
  int64_t cap_;
  uint64_t rng_;
  std::vector<Example> buffer_;
  std::vector<TarEntry> entries_;
  size_t next_entry_ = 0, next_shard_ = 0;
  std::string path_;
};
}  // namespace

ShardedDataset::ShardedDataset(std::vector<std::string> shards, std::vector<std::string> fields, int64_t buffer,
                               int rank, int world)
    : shards_(std::move(shards)), fields_(std::move(fields)), buffer_(buffer), rank_(rank), world_(world) {
  TS_CHECK(!shards_.empty(), "ShardedDataset: no shards given");
  TS_CHECK(!fields_.empty(), "ShardedDataset: no fields given (e.g. {\"x.npy\", \"y.cls\"})");
  TS_CHECK(world >= 1 && rank >= 0 && rank < world, "ShardedDataset: rank ", rank, " is not in [0, ", world, ")");
  TS_CHECK(buffer >= 0, "ShardedDataset: shuffle_buffer must be non-negative");
}

std::unique_ptr<IterableDataset::Stream> ShardedDataset::open(int worker, int num_workers, int64_t epoch,
                                                             uint64_t seed) const {
  std::vector<std::string> order = shards_;
  if (buffer_ > 0) {
    uint64_t s = mix(seed, static_cast<uint64_t>(epoch));
    for (size_t i = order.size(); i-- > 1;) {
      s = mix(s, i);
      std::swap(order[i], order[s % (i + 1)]);
    }
  }
  const size_t slots = static_cast<size_t>(world_) * static_cast<size_t>(num_workers);
  const size_t mine = static_cast<size_t>(rank_) * static_cast<size_t>(num_workers) + static_cast<size_t>(worker);
  std::vector<std::string> assigned;
  for (size_t i = 0; i < order.size(); ++i)
    if (i % slots == mine) assigned.push_back(order[i]);
  return std::make_unique<ShardStream>(std::move(assigned), fields_, buffer_,
                                       mix(mix(seed, static_cast<uint64_t>(epoch)), mine));
}

std::vector<std::string> expand_shards(const std::string& spec) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> out;
  if (fs::is_directory(spec, ec)) {
    for (auto& e : fs::directory_iterator(spec, ec))
      if (e.path().extension() == ".tar") out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    TS_CHECK(!out.empty(), "no .tar shards in ", spec);
    return out;
  }
  static const std::regex brace(R"((.*)\{(\d+)\.\.(\d+)\}(.*))");
  std::smatch m;
  if (std::regex_match(spec, m, brace)) {
    const std::string lo = m[2], hi = m[3];
    long a = std::stol(lo), b = std::stol(hi);
    TS_CHECK(a <= b && b - a < 1000000, "bad shard range in '", spec, "'");
    for (long i = a; i <= b; ++i) {
      std::string n = std::to_string(i);
      if (n.size() < lo.size()) n = std::string(lo.size() - n.size(), '0') + n;
      out.push_back(m[1].str() + n + m[4].str());
    }
    return out;
  }
  TS_CHECK(fs::exists(spec, ec), "shard '", spec, "' does not exist");
  return {spec};
}

}  // namespace tessera::data
