// Tensors from CSV and .npy files, and synthetic datasets for benchmarks.
#include <cmath>
#include <optional>
#include <string>

#include "tessera/core/numbers.h"
#include "tessera/data/datasets.h"
#include "tessera/io/file.h"
#include "tessera/io/npy.h"
#include "tessera/ops/ops.h"

namespace tessera::data {
namespace {

// A CSV field as a number (spaces around it allowed; nan and inf as strtod
// reads them), or nullopt for text such as a header. Locale-independent.
std::optional<double> table_number(const std::string& field) {
  size_t b = field.find_first_not_of(" \t"), e = field.find_last_not_of(" \t");
  if (b == std::string::npos) return std::nullopt;
  std::string f = field.substr(b, e - b + 1);
  if (auto v = parse_double(f)) return v;
  std::string lower;
  for (char c : f) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  bool neg = !lower.empty() && lower[0] == '-';
  if (!lower.empty() && (lower[0] == '-' || lower[0] == '+')) lower.erase(0, 1);
  if (lower == "nan") return std::nan("");
  if (lower == "inf" || lower == "infinity") return neg ? -HUGE_VAL : HUGE_VAL;
  return std::nullopt;
}

}  // namespace

Tensor read_csv(const std::string& path) {
  std::vector<char> buf = io::read_file(path, size_t(1) << 32);
  std::vector<float> values;
  int64_t cols = -1, rows = 0, line_no = 0;
  size_t pos = 0;
  while (pos < buf.size()) {
    size_t end = pos;
    while (end < buf.size() && buf[end] != '\n') ++end;
    std::string line(buf.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::vector<float> row;
    bool numeric = true;
    size_t start = 0;
    for (;;) {
      size_t comma = line.find(',', start);
      std::string field = line.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      std::optional<double> v = table_number(field);
      if (!v) numeric = false;
      row.push_back(static_cast<float>(v.value_or(0.0)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (!numeric) {
      TS_CHECK(rows == 0 && cols == -1, path, ":", line_no, ": a non-numeric field after the first line");
      cols = static_cast<int64_t>(row.size());  // a header line: only its width counts
      continue;
    }
    if (cols == -1) cols = static_cast<int64_t>(row.size());
    TS_CHECK(static_cast<int64_t>(row.size()) == cols, path, ":", line_no, ": has ", row.size(), " fields, expected ",
             cols);
    values.insert(values.end(), row.begin(), row.end());
    ++rows;
  }
  TS_CHECK(rows > 0, path, ": no data rows");
  return from_buffer(values.data(), {rows, cols}, DType::F32);
}

std::shared_ptr<TensorDataset> csv_dataset(const std::string& path, int64_t label_column) {
  Tensor t = read_csv(path);
  const int64_t cols = t.size(1);
  const int64_t lc = label_column < 0 ? label_column + cols : label_column;
  TS_CHECK(lc >= 0 && lc < cols, path, ": label column ", label_column, " is out of range for ", cols, " columns");
  TS_CHECK(cols >= 2, path, ": needs at least one feature column besides the label");
  std::vector<int64_t> feat;
  for (int64_t c = 0; c < cols; ++c)
    if (c != lc) feat.push_back(c);
  Tensor x = ops::index_select(t, 1, tensor(feat));
  Tensor y = t.select(1, lc);
  TS_CHECK(ops::all(ops::eq(y, ops::round(y))).item<bool>(), path, ": label column ", lc, " holds non-integer values");
  return std::make_shared<TensorDataset>(TensorList{x.contiguous(), y.to(DType::I64)});
}

std::shared_ptr<TensorDataset> npy_dataset(const std::vector<std::string>& paths) {
  TS_CHECK(!paths.empty(), "npy_dataset: no files given");
  TensorList ts;
  for (auto& p : paths) ts.push_back(io::load_npy(p));
  return std::make_shared<TensorDataset>(ts);
}

// ---- synthetic --------------------------------------------------------------------------
SyntheticImages::SyntheticImages(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed)
    : n_(n), c_(c), h_(h), w_(w), classes_(classes), seed_(seed) {
  TS_CHECK(n > 0 && c > 0 && h > 0 && w > 0 && classes > 0, "SyntheticImages: every size must be positive");
}

Example SyntheticImages::get(int64_t i) const {
  TS_CHECK(i >= 0 && i < n_, "SyntheticImages: index ", i, " out of range for ", n_);
  Generator g(seed_ * 1000003 + static_cast<uint64_t>(i));
  const int64_t label = i % classes_;
  Tensor x = ops::randn({c_, h_, w_}, {}, &g);
  // A class-dependent pattern on top of the noise, so that the task is learnable.
  x = ops::add(x, static_cast<double>(label) / static_cast<double>(classes_) - 0.5);
  return {x, scalar_tensor(label, DType::I64)};
}

Example SyntheticImages::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Example> s;
  for (int64_t i : indices) s.push_back(get(i));
  return default_collate(s);
}

SyntheticTokens::SyntheticTokens(int64_t n, int64_t block, int64_t vocab, uint64_t seed)
    : n_(n), block_(block), vocab_(vocab), seed_(seed) {
  TS_CHECK(n > 0 && block > 0 && vocab > 1, "SyntheticTokens: size, block_size and vocab must be positive");
}

Example SyntheticTokens::get(int64_t i) const {
  TS_CHECK(i >= 0 && i < n_, "SyntheticTokens: index ", i, " out of range for ", n_);
  Generator g(seed_ * 1000003 + static_cast<uint64_t>(i));
  Tensor t = ops::randint(0, vocab_, {block_ + 1}, DType::I64, &g);
  return {t.slice(0, 0, block_), t.slice(0, 1, block_ + 1)};
}

}  // namespace tessera::data
