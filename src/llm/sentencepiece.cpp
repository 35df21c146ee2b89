// SentencePiece's .model files (a protobuf ModelProto) as Tessera tokenizers.
// Only what the tokenizer needs is read, with a small wire-format reader
// that checks every length against the bytes left: the pieces (text, score,
// type), the trainer's model type, and the normalizer's settings.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/io/file.h"
#include "tessera/llm/gguf.h"
#include "tessera/llm/tokenizer.h"

namespace tessera::llm {
namespace {

// Protobuf's wire format: varint keys (field << 3 | wire type), then a
// varint, a fixed 64/32-bit value, or a length-delimited byte string.
class Wire {
 public:
  Wire(const uint8_t* p, size_t n, const std::string& what) : p_(p), end_(p + n), what_(what) {}
  bool done() const { return p_ == end_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      TS_CHECK(p_ < end_, what_, ": the file ends inside a number (truncated?)");
      const uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    TS_ERROR(what_, ": a number longer than 10 bytes (not a SentencePiece model?)");
  }
  // The next field: its number and wire type.
  std::pair<uint64_t, int> key() {
    const uint64_t k = varint();
    return {k >> 3, static_cast<int>(k & 7)};
  }
  std::pair<const uint8_t*, size_t> bytes() {
    const uint64_t n = varint();
    TS_CHECK(n <= static_cast<uint64_t>(end_ - p_), what_, ": a field of ", n, " bytes with ", end_ - p_,
             " left (truncated or not a SentencePiece model)");
    const uint8_t* start = p_;
    p_ += n;
    return {start, static_cast<size_t>(n)};
  }
  float fixed32() {
    TS_CHECK(end_ - p_ >= 4, what_, ": the file ends inside a 32-bit field");
    float f;
    std::memcpy(&f, p_, 4);
    p_ += 4;
    return f;
  }
  void skip(int wire) {
    switch (wire) {
      case 0: varint(); return;
      case 1:
        TS_CHECK(end_ - p_ >= 8, what_, ": the file ends inside a 64-bit field");
        p_ += 8;
        return;
      case 2: bytes(); return;
      case 5: fixed32(); return;
      default: TS_ERROR(what_, ": wire type ", wire, " is not protobuf's (not a SentencePiece model?)");
    }
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  const std::string& what_;
};

}  // namespace

Tokenizer Tokenizer::from_sentencepiece(const uint8_t* data, size_t size, const std::string& what) {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<TokenType> types;
  int64_t model_type = 1;  // protobuf's default: UNIGRAM
  bool byte_fallback = false, add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
  std::string normalizer = "nmt_nfkc";
  Wire w(data, size, what);
  while (!w.done()) {
    const auto [field, wire] = w.key();
    if (field == 1 && wire == 2) {  // repeated SentencePiece pieces
      auto [p, n] = w.bytes();
      Wire m(p, n, what);
      std::string piece;
      float score = 0;
      int64_t type = 1;  // NORMAL
      while (!m.done()) {
        const auto [f, t] = m.key();
        if (f == 1 && t == 2) {
          auto [s, len] = m.bytes();
          piece.assign(reinterpret_cast<const char*>(s), len);
        } else if (f == 2 && t == 5) {
          score = m.fixed32();
        } else if (f == 3 && t == 0) {
          type = static_cast<int64_t>(m.varint());
        } else {
          m.skip(t);
        }
      }
      TS_CHECK(type >= 1 && type <= 6, what, ": piece ", pieces.size(), " has type ", type, " (SentencePiece's are 1 to 6)");
      TS_CHECK(std::isfinite(score), what, ": piece ", pieces.size(), " has a score that is not finite");
      TS_CHECK(pieces.size() < (size_t{1} << 31), what, ": more than 2^31 pieces");
      pieces.push_back(std::move(piece));
      scores.push_back(score);
      // SentencePiece's types map onto GGUF's: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, BYTE 6, UNUSED 5.
      types.push_back(static_cast<TokenType>(type));
    } else if (field == 2 && wire == 2) {  // TrainerSpec
      auto [p, n] = w.bytes();
      Wire m(p, n, what);
      while (!m.done()) {
        const auto [f, t] = m.key();
        if (f == 3 && t == 0) model_type = static_cast<int64_t>(m.varint());
        else if (f == 35 && t == 0) byte_fallback = m.varint() != 0;
        else m.skip(t);
      }
    } else if (field == 3 && wire == 2) {  // NormalizerSpec
      auto [p, n] = w.bytes();
      Wire m(p, n, what);
      while (!m.done()) {
        const auto [f, t] = m.key();
        if (f == 1 && t == 2) {
          auto [s, len] = m.bytes();
          normalizer.assign(reinterpret_cast<const char*>(s), len);
        } else if (f == 3 && t == 0) {
          add_dummy_prefix = m.varint() != 0;
        } else if (f == 4 && t == 0) {
          remove_extra_whitespaces = m.varint() != 0;
        } else if (f == 5 && t == 0) {
          escape_whitespaces = m.varint() != 0;
        } else {
          m.skip(t);
        }
      }
    } else {
      w.skip(wire);
    }
  }
  TS_CHECK(!pieces.empty(), what, ": no pieces (not a SentencePiece model?)");
  // Tessera (like llama.cpp) runs the merges of a BPE model on raw text; a
  // model that normalizes or is a unigram model would tokenize differently.
  TS_CHECK(model_type == 2, what, ": a ", model_type == 1 ? "unigram" : "non-BPE", " SentencePiece model (type ",
           model_type, "); Tessera reads BPE models (spm_train --model_type=bpe)");
  TS_CHECK(normalizer == "identity" && !remove_extra_whitespaces && escape_whitespaces, what,
           ": the model normalizes text (normalizer '", normalizer, "', remove_extra_whitespaces ",
           remove_extra_whitespaces, "); Tessera reads models trained with --normalization_rule_name=identity "
           "--remove_extra_whitespaces=false");
  (void)byte_fallback;  // byte pieces, when present, are the fallback whatever the flag says
  int32_t unk = -1, bos = -1, eos = -1;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (types[i] == TokenType::Unknown && unk < 0) unk = static_cast<int32_t>(i);
    if (types[i] == TokenType::Control && pieces[i] == "<s>") bos = static_cast<int32_t>(i);
    if (types[i] == TokenType::Control && pieces[i] == "</s>") eos = static_cast<int32_t>(i);
  }
  return sentencepiece(std::move(pieces), std::move(scores), std::move(types), bos, eos, unk, bos >= 0, false,
                       add_dummy_prefix);
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  char magic[4] = {};
  if (std::FILE* fp = std::fopen(path.c_str(), "rb")) {
    const size_t n = std::fread(magic, 1, 4, fp);
    std::fclose(fp);
    if (n == 4 && std::memcmp(magic, "GGUF", 4) == 0) return from_gguf(GgufFile::open(path));
  }
  return from_sentencepiece_file(path);
}

Tokenizer Tokenizer::from_sentencepiece_file(const std::string& path) {
  const std::vector<char> bytes = io::read_file(path, size_t{1} << 30);
  return from_sentencepiece(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

}  // namespace tessera::llm
