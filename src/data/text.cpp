// Language-modelling data: byte- and character-level tokens over a text.
#include <algorithm>
#include <filesystem>
#include <set>

#include "tessera/data/datasets.h"
#include "tessera/io/file.h"

namespace tessera::data {

namespace {
// Splits UTF-8 text into characters; invalid bytes become single-byte characters.
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (i + n > s.size()) n = 1;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}
}  // namespace

std::string read_text_file(const std::string& path) {
  std::vector<char> b = io::read_file(path, size_t(1) << 32);
  return std::string(b.begin(), b.end());
}

std::string read_fortunes(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TS_CHECK(fs::is_directory(dir, ec), "fortunes directory ", dir, " not found. It comes with Debian's package "
           "`fortunes`: run `apt-get install fortunes` (scripts/setup.sh does this), or give a text file instead.");
  std::vector<std::string> files;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (!e.is_regular_file() || e.is_symlink() || name.ends_with(".dat") || name.ends_with(".u8")) continue;
    files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (auto& f : files) text += read_text_file(f);
  TS_CHECK(!text.empty(), "no fortune files found in ", dir);
  return text;
}

TextDataset::TextDataset(const std::string& text, int64_t block, const std::string& level,
                         std::vector<std::string> vocab, int64_t stride)
    : block_(block), stride_(stride > 0 ? stride : block), level_(level), vocab_(std::move(vocab)) {
  TS_CHECK(level == "byte" || level == "char", "TextDataset: level must be 'byte' or 'char', got '", level, "'");
  TS_CHECK(block > 0, "TextDataset: block_size must be positive, got ", block);
  if (level == "char") {
    if (vocab_.empty()) {
      auto chars = utf8_chars(text);
      std::set<std::string> uniq(chars.begin(), chars.end());
      vocab_.assign(uniq.begin(), uniq.end());
    }
    for (size_t i = 0; i < vocab_.size(); ++i) index_[vocab_[i]] = static_cast<int64_t>(i);
  }
  tokens_ = encode(text);
  TS_CHECK(tokens_.numel() > block, "TextDataset: the text has ", tokens_.numel(), " tokens; a block of ", block,
           " needs at least ", block + 1);
}

std::shared_ptr<TextDataset> TextDataset::from_tokens(std::vector<int64_t> ids, int64_t vocab_size, int64_t block,
                                                     int64_t stride) {
  TS_CHECK(block > 0, "TextDataset: block_size must be positive, got ", block);
  TS_CHECK(static_cast<int64_t>(ids.size()) > block, "TextDataset: the text has ", ids.size(), " tokens; a block of ",
           block, " needs at least ", block + 1);
  for (int64_t id : ids)
    TS_CHECK(id >= 0 && id < vocab_size, "TextDataset: token ", id, " is outside the vocabulary of ", vocab_size);
  auto d = std::shared_ptr<TextDataset>(new TextDataset());
  d->tokens_ = tessera::tensor(ids);
  d->block_ = block;
  d->stride_ = stride > 0 ? stride : block;
  d->level_ = "tokens";
  d->token_vocab_ = vocab_size;
  return d;
}

Tensor TextDataset::encode(const std::string& text) const {
  TS_CHECK(level_ != "tokens", "TextDataset: a tokenized dataset encodes with its tokenizer");
  std::vector<int64_t> ids;
  if (level_ == "byte") {
    ids.reserve(text.size());
    for (unsigned char c : text) ids.push_back(c);
  } else {
    for (auto& ch : utf8_chars(text)) {
      auto it = index_.find(ch);
      TS_CHECK(it != index_.end(), "TextDataset: character '", ch, "' is not in the vocabulary");
      ids.push_back(it->second);
    }
  }
  return tessera::tensor(ids);
}

std::string TextDataset::decode(const Tensor& tokens) const {
  std::string out;
  for (int64_t id : tokens.to_vector<int64_t>()) {
    TS_CHECK(id >= 0 && id < vocab_size(), "TextDataset: token ", id, " is outside the vocabulary of ", vocab_size());
    TS_CHECK(level_ != "tokens", "TextDataset: a tokenized dataset decodes with its tokenizer");
    if (level_ == "byte")
      out += static_cast<char>(id);
    else
      out += vocab_[id];
  }
  return out;
}

int64_t TextDataset::size() const { return (tokens_.numel() - block_ - 1) / stride_ + 1; }

Example TextDataset::get(int64_t i) const {
  TS_CHECK(i >= 0 && i < size(), "TextDataset: index ", i, " is out of range for ", size(), " windows");
  const int64_t start = i * stride_;
  return {tokens_.slice(0, start, start + block_), tokens_.slice(0, start + 1, start + block_ + 1)};
}

std::shared_ptr<TextDataset> TextDataset::split(double begin, double end) const {
  TS_CHECK(0 <= begin && begin < end && end <= 1, "TextDataset::split: needs 0 <= begin < end <= 1");
  const int64_t n = tokens_.numel();
  auto b = static_cast<int64_t>(begin * n), e = static_cast<int64_t>(end * n);
  TS_CHECK(e - b > block_, "TextDataset::split: the part [", begin, ", ", end, ") has ", e - b,
           " tokens, too few for a block of ", block_);
  auto d = std::shared_ptr<TextDataset>(new TextDataset());
  d->tokens_ = tokens_.slice(0, b, e).contiguous();
  d->block_ = block_;
  d->stride_ = stride_;
  d->level_ = level_;
  d->vocab_ = vocab_;
  d->index_ = index_;
  d->token_vocab_ = token_vocab_;
  return d;
}

}  // namespace tessera::data
