#include "tessera/llm/tokenizer.h"

#include <algorithm>
#include <queue>

#include "llm/pretokenize.h"
#include "tessera/core/error.h"
#include "tessera/llm/gguf.h"

namespace tessera::llm {
namespace {

const std::string kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// Bytes of the UTF-8 character that starts with byte c, by its high four
// bits as llama.cpp counts them (a stray continuation byte: 1; 0xF8-0xFF: 4).
size_t utf8_len(unsigned char c) {
  static const size_t by_high_bits[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return by_high_bits[c >> 4];
}

std::string escape_spaces(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (char c : s) {
    if (c == ' ') out += kSpace;
    else out += c;
  }
  return out;
}

std::string unescape_spaces(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

// The byte of a "<0xAB>" token, or -1.
int byte_of(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  const int h = hex(t[3]), l = hex(t[4]);
  return h < 0 || l < 0 ? -1 : h * 16 + l;
}

constexpr uint8_t kStripLeft = 1, kStripRight = 2;

int32_t find_linear(const std::vector<std::string>& tokens, std::string_view text) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == text) return static_cast<int32_t>(i);
  return -1;
}

bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }  // C's isspace

bool is_special(TokenType t) {
  return t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown;
}

// GPT-2's byte-to-Unicode table: the printable bytes stand for themselves,
// the others (controls, space, 127-160, 173) for U+0100 upwards in order.
struct ByteChars {
  uint32_t of_byte[256];
  int16_t byte_of[324];  // code point -> byte, or -1
  ByteChars() {
    std::fill(std::begin(byte_of), std::end(byte_of), int16_t{-1});
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      of_byte[b] = printable ? static_cast<uint32_t>(b) : next++;
      byte_of[of_byte[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteChars& byte_chars() {
  static const ByteChars t;
  return t;
}

// A word's bytes written as GPT-2's characters.
std::string byte_encode(std::string_view word) {
  std::string out;
  out.reserve(word.size() * 2);
  for (unsigned char c : word) append_utf8(byte_chars().of_byte[c], out);
  return out;
}

// The bytes a byte-level token stands for; a character outside the table
// (never in a well-formed vocabulary) is kept as its UTF-8.
std::string byte_decode(const std::string& token) {
  std::string out;
  for (uint32_t c : utf8_code_points(token)) {
    if (c < 324 && byte_chars().byte_of[c] >= 0) out += static_cast<char>(byte_chars().byte_of[c]);
    else append_utf8(c, out);
  }
  return out;
}

// llama.cpp's clean-up of decoded byte-level text (clean_spaces): no space
// before . , ! ?, none around a lone apostrophe, none before 's 'm 're 've.
std::string clean_spaces(const std::string& s) {
  std::string a;
  for (size_t i = 0; i < s.size(); ++i) {
    const char x = s[i];
    if (i > 0 && s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a += x;
  }
  std::string b;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i];
    if (i > 0 && x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      b += x;
      ++i;  // and the space after it
      continue;
    }
    b += x;
  }
  std::string c;
  for (size_t i = 0; i < b.size(); ++i) {
    const char x = b[i];
    if (i > 0 && b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      const char x2 = i + 2 < b.size() ? b[i + 2] : 0;
      if (x1 == 's' || x1 == 'm' || (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) c.pop_back();
    }
    c += x;
  }
  return c;
}

}  // namespace

// ---- construction -----------------------------------------------------------

Tokenizer Tokenizer::from_gguf(const GgufFile& f) try {
  const std::string& what = f.what();
  const GgufValue* model = f.find("tokenizer.ggml.model");
  TS_CHECK(model != nullptr, what, ": the file has no tokenizer (no tokenizer.ggml.model key)");
  const std::string& name = model->as_string("tokenizer.ggml.model");
  TS_CHECK(name == "llama" || name == "gpt2", what, ": tokenizer.ggml.model '", name, "' is not one Tessera reads "
           "('llama': SentencePiece BPE, 'gpt2': byte-level BPE)");
  Tokenizer t;
  t.model_ = name == "gpt2" ? Model::Bpe : Model::SentencePiece;
  t.tokens_ = f.get("tokenizer.ggml.tokens").as_strings("tokenizer.ggml.tokens");
  const size_t n = t.tokens_.size();
  TS_CHECK(n > 0 && n < (size_t{1} << 31), what, ": tokenizer.ggml.tokens has ", n, " tokens (1 to 2^31 - 1)");
  if (const GgufValue* s = f.find("tokenizer.ggml.scores")) {
    const auto& v = s->as_floats("tokenizer.ggml.scores");
    TS_CHECK(v.size() == n, what, ": tokenizer.ggml.scores has ", v.size(), " entries for ", n, " tokens");
    t.scores_.assign(v.begin(), v.end());
  } else {
    t.scores_.assign(n, 0.0f);
  }
  if (const GgufValue* ty = f.find("tokenizer.ggml.token_type")) {
    const auto& v = ty->as_ints("tokenizer.ggml.token_type");
    TS_CHECK(v.size() == n, what, ": tokenizer.ggml.token_type has ", v.size(), " entries for ", n, " tokens");
    for (size_t i = 0; i < n; ++i) {
      TS_CHECK(v[i] >= 0 && v[i] <= 6, what, ": tokenizer.ggml.token_type[", i, "] is ", v[i], " (0 to 6)");
      t.types_.push_back(static_cast<TokenType>(v[i]));
    }
  } else {
    t.types_.assign(n, TokenType::Normal);
  }
  if (t.model_ == Model::Bpe) {
    const GgufValue* merges = f.find("tokenizer.ggml.merges");
    TS_CHECK(merges != nullptr, what, ": a byte-level BPE tokenizer needs tokenizer.ggml.merges");
    t.set_merges(merges->as_strings("tokenizer.ggml.merges"));
    const GgufValue* pre = f.find("tokenizer.ggml.pre");
    TS_CHECK(pre != nullptr, what, ": a byte-level BPE tokenizer needs tokenizer.ggml.pre, the pre-tokenizer that cuts "
             "text into words (e.g. 'gpt-2', 'llama-bpe', 'qwen2')");
    t.set_pre(pre->as_string("tokenizer.ggml.pre"), what);
  }
  // llama.cpp's defaults: SentencePiece <unk> <s> </s>; byte-level GPT-2's id 11.
  if (t.model_ == Model::Bpe) t.unk_ = -1, t.bos_ = 11, t.eos_ = 11;
  else t.unk_ = 0, t.bos_ = 1, t.eos_ = 2;
  auto id_key = [&](const char* key, int32_t& id) {
    if (const GgufValue* v = f.find(key)) {
      const int64_t x = v->as_int(key);
      TS_CHECK(x >= -1 && x < static_cast<int64_t>(n), what, ": ", key, " is ", x, ", not a token id (the vocabulary "
               "has ", n, ")");
      id = static_cast<int32_t>(x);
    }
  };
  id_key("tokenizer.ggml.unknown_token_id", t.unk_);
  id_key("tokenizer.ggml.bos_token_id", t.bos_);
  id_key("tokenizer.ggml.eos_token_id", t.eos_);
  for (int32_t* id : {&t.unk_, &t.bos_, &t.eos_})
    if (*id >= static_cast<int32_t>(n)) *id = -1;
  if (t.model_ == Model::Bpe) {  // byte-level defaults: no space prefix, BOS only for Llama 3
    t.add_space_prefix_ = false;
    t.add_bos_ = t.ignore_merges_;  // llama.cpp sets both for the Llama 3 names
  }
  if (const GgufValue* v = f.find("tokenizer.ggml.add_bos_token")) t.add_bos_ = v->as_bool("tokenizer.ggml.add_bos_token");
  if (const GgufValue* v = f.find("tokenizer.ggml.add_eos_token")) t.add_eos_ = v->as_bool("tokenizer.ggml.add_eos_token");
  if (const GgufValue* v = f.find("tokenizer.ggml.add_space_prefix"))
    t.add_space_prefix_ = v->as_bool("tokenizer.ggml.add_space_prefix");
  TS_CHECK(!(t.add_bos_ && t.bos_ < 0), what, ": tokenizer.ggml.add_bos_token is set but there is no BOS token");
  TS_CHECK(!(t.add_eos_ && t.eos_ < 0), what, ": tokenizer.ggml.add_eos_token is set but there is no EOS token");
  std::string model_name;
  if (const GgufValue* v = f.find("general.name"); v && v->type() == GgufType::String) model_name = v->as_string();
  t.apply_llama_cpp_fixes(model_name);
  t.build();
  return t;
} catch (const Error& e) {
  rethrow_naming_file(f.what(), e);
}

Tokenizer Tokenizer::sentencepiece(std::vector<std::string> tokens, std::vector<float> scores,
                                   std::vector<TokenType> types, int32_t bos, int32_t eos, int32_t unk, bool add_bos,
                                   bool add_eos, bool add_space_prefix) {
  const size_t n = tokens.size();
  TS_CHECK(n > 0 && scores.size() == n && types.size() == n, "Tokenizer: ", n, " tokens need as many scores (got ",
           scores.size(), ") and types (got ", types.size(), ")");
  Tokenizer t;
  t.tokens_ = std::move(tokens);
  t.scores_ = std::move(scores);
  t.types_ = std::move(types);
  t.bos_ = bos, t.eos_ = eos, t.unk_ = unk;
  for (int32_t id : {bos, eos, unk})
    TS_CHECK(id >= -1 && id < static_cast<int32_t>(n), "Tokenizer: special token id ", id, " is outside the ", n,
             "-token vocabulary");
  t.add_bos_ = add_bos, t.add_eos_ = add_eos, t.add_space_prefix_ = add_space_prefix;
  TS_CHECK(!(add_bos && bos < 0) && !(add_eos && eos < 0), "Tokenizer: add_bos/add_eos need a BOS/EOS token");
  t.apply_llama_cpp_fixes("");
  t.build();
  return t;
}

Tokenizer Tokenizer::bpe(std::vector<std::string> tokens, std::vector<TokenType> types,
                         std::vector<std::string> merges, std::string_view pre, int32_t bos, int32_t eos, bool add_bos,
                         bool add_eos) {
  const size_t n = tokens.size();
  TS_CHECK(n > 0 && types.size() == n, "Tokenizer: ", n, " tokens need as many types (got ", types.size(), ")");
  Tokenizer t;
  t.model_ = Model::Bpe;
  t.tokens_ = std::move(tokens);
  t.types_ = std::move(types);
  t.scores_.assign(n, 0.f);
  for (int32_t id : {bos, eos})
    TS_CHECK(id >= -1 && id < static_cast<int32_t>(n), "Tokenizer: special token id ", id, " is outside the ", n,
             "-token vocabulary");
  t.bos_ = bos, t.eos_ = eos, t.unk_ = -1;
  t.add_bos_ = add_bos, t.add_eos_ = add_eos, t.add_space_prefix_ = false;
  TS_CHECK(!(add_bos && bos < 0) && !(add_eos && eos < 0), "Tokenizer: add_bos/add_eos need a BOS/EOS token");
  t.set_merges(std::move(merges));
  t.set_pre(pre, "Tokenizer");
  t.apply_llama_cpp_fixes("");
  t.build();
  return t;
}

void Tokenizer::set_merges(std::vector<std::string> merges) {
  TS_CHECK(merges.size() < (size_t{1} << 31), "Tokenizer: ", merges.size(), " merges (at most 2^31 - 1)");
  merges_ = std::move(merges);
  ranks_.clear();
  ranks_.reserve(merges_.size());
  for (size_t i = 0; i < merges_.size(); ++i) {
    // "left right", split at the first space after the first byte (llama.cpp's
    // rule); a line without one can never match and is kept only for writing.
    const size_t sp = merges_[i].find(' ', 1);
    if (sp == std::string::npos) continue;
    ranks_.emplace(merges_[i], static_cast<int32_t>(i));  // a repeated line keeps its first rank
  }
}

void Tokenizer::set_pre(std::string_view pre, const std::string& what) {
  const PreTokenizer p = pre_tokenizer_from_name(pre, what);
  pre_ = static_cast<int>(p);
  pre_name_ = pre;
  ignore_merges_ = pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" || pre == "pixtral";
  // llama.cpp cleans decoded spaces for byte-level vocabularies except these.
  clean_spaces_ = !(pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "command-r");
}

Tokenizer Tokenizer::characters(std::vector<std::string> chars) {
  Tokenizer t;
  t.model_ = Model::Characters;
  if (chars.empty()) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      t.tokens_.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
      t.types_.push_back(TokenType::Byte);
    }
  } else {
    for (const std::string& c : chars)
      TS_CHECK(!c.empty() && utf8_len(static_cast<unsigned char>(c[0])) == c.size(), "Tokenizer: vocabulary entry '",
               c, "' is not one UTF-8 character");
    t.tokens_ = std::move(chars);
    t.types_.assign(t.tokens_.size(), TokenType::UserDefined);  // written as they are
  }
  t.scores_.assign(t.tokens_.size(), 0.f);
  t.add_bos_ = t.add_eos_ = t.add_space_prefix_ = false;
  t.build();
  t.special_.clear();  // single characters: no special-token pass
  return t;
}

void Tokenizer::to_gguf(GgufWriter& w) const {
  TS_CHECK(model_ != Model::Characters, "Tokenizer: a character vocabulary has no GGUF tokenizer model "
           "(llama.cpp could not read it)");
  std::vector<double> scores(scores_.begin(), scores_.end());
  std::vector<int64_t> types;
  for (TokenType t : types_) types.push_back(static_cast<int64_t>(t));
  w.set("tokenizer.ggml.model", GgufValue::string(model_ == Model::Bpe ? "gpt2" : "llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::strings(tokens_));
  if (model_ == Model::Bpe) {
    w.set("tokenizer.ggml.pre", GgufValue::string(pre_name_));
    w.set("tokenizer.ggml.merges", GgufValue::strings(merges_));
  } else {
    w.set("tokenizer.ggml.scores", GgufValue::floats(GgufType::F32, std::move(scores)));
  }
  w.set("tokenizer.ggml.token_type", GgufValue::integers(GgufType::I32, std::move(types)));
  for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", bos_}, std::pair{"tokenizer.ggml.eos_token_id", eos_},
                         std::pair{"tokenizer.ggml.unknown_token_id", unk_}})
    if (id >= 0) w.set(key, GgufValue::integer(GgufType::U32, id));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(add_bos_));
  w.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(add_eos_));
  if (model_ == Model::SentencePiece) w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(add_space_prefix_));
}

// What llama.cpp changes in a vocabulary at load, by token text, so that
// Tessera reads the same file the same way (llama_vocab::impl::load):
// end-of-turn tokens that a converter left normal or user-defined become
// control tokens (never matched in user text) and end generation; Phi-3's
// special tokens eat the spaces after them.
void Tokenizer::apply_llama_cpp_fixes(const std::string& model_name) {
  static const char* const end_texts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
      "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
      "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
      "[e~["};
  end_of_generation_.clear();
  for (size_t i = 0; i < tokens_.size(); ++i)
    for (const char* e : end_texts)
      if (tokens_[i] == e) {
        types_[i] = TokenType::Control;
        end_of_generation_.push_back(static_cast<int32_t>(i));
      }
  if (eos_ >= 0 && !is_end_of_generation(eos_)) end_of_generation_.push_back(eos_);
  strip_.assign(tokens_.size(), 0);
  std::string lower = model_name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("phi-3") != std::string::npos || lower.find("phi3") != std::string::npos) {
    for (size_t i = 0; i < tokens_.size(); ++i)
      if (is_special(types_[i])) strip_[i] = kStripRight;
    for (const char* keep : {"<unk>", "<s>", "<|endoftext|>"})
      if (const int32_t id = find_linear(tokens_, keep); id >= 0) strip_[id] = 0;
  }
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::find(end_of_generation_.begin(), end_of_generation_.end(), id) != end_of_generation_.end();
}

int32_t Tokenizer::control_token_in(std::string_view text) const {
  for (int32_t id : special_)
    if ((types_[id] == TokenType::Control || types_[id] == TokenType::Unknown) && text.find(tokens_[id]) != text.npos)
      return id;
  return -1;
}

void Tokenizer::build() {
  ids_.clear();
  ids_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) ids_[tokens_[i]] = static_cast<int32_t>(i);  // a repeated text: the last
  longest_ = 1;
  for (const std::string& t : tokens_) longest_ = std::max(longest_, t.size());
  special_.clear();
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (is_special(types_[i]) && !tokens_[i].empty()) special_.push_back(static_cast<int32_t>(i));
  std::stable_sort(special_.begin(), special_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
  static const char hex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
    int32_t id = find(name);
    if (id < 0) id = find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = id;
  }
}

// ---- lookups ----------------------------------------------------------------

void Tokenizer::check_id(int32_t id, const char* what) const {
  TS_CHECK(id >= 0 && id < size(), "Tokenizer::", what, ": token id ", id, " is outside the ", size(),
           "-token vocabulary");
}

const std::string& Tokenizer::text(int32_t id) const {
  check_id(id, "text");
  return tokens_[id];
}

TokenType Tokenizer::type(int32_t id) const {
  check_id(id, "type");
  return types_[id];
}

int32_t Tokenizer::find(std::string_view text) const {
  auto it = ids_.find(std::string(text));
  return it == ids_.end() ? -1 : it->second;
}

int32_t Tokenizer::unknown_for(const std::string& piece) const {
  TS_CHECK(unk_ >= 0, "Tokenizer: '", piece, "' has no token, no byte tokens, and the vocabulary has no unknown token "
           "to stand for it");
  return unk_;
}

// ---- encoding ---------------------------------------------------------------

namespace {

struct Symbol {
  int prev, next;
  size_t begin, len;  // bytes of the text; len 0 once merged into its left neighbour
};

// One symbol per UTF-8 character of `text`, linked in order.
void split_characters(std::string_view text, std::vector<Symbol>& sym) {
  sym.clear();
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(utf8_len(static_cast<unsigned char>(text[off])), text.size() - off);
    const int i = static_cast<int>(sym.size());
    sym.push_back({i - 1, off + len == text.size() ? -1 : i + 1, off, len});
    off += len;
  }
}

// Merges the queue's best pair while it is still current (neither side
// merged since it was offered), then offers the pairs it makes with its
// neighbours; llama.cpp's loop for both SentencePiece and byte-level BPE.
template <class Queue, class Offer>
void merge_pairs(std::vector<Symbol>& sym, Queue& queue, Offer&& offer) {
  while (!queue.empty()) {
    const auto b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    offer(l.prev, b.left);
    offer(b.left, l.next);
  }
}

struct Bigram {
  int left, right;
  float score;
  size_t len;
  // The queue's top: the highest score, then the leftmost pair.
  bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
};

}  // namespace

// llama.cpp's SentencePiece merge loop (llm_tokenizer_spm_session), so that
// ties break the same way.
void Tokenizer::encode_spm(std::string text, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym;
  split_characters(text, sym);
  std::priority_queue<Bigram> queue;
  std::unordered_map<std::string, std::pair<int, int>> rev_merge;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    std::string joined = text.substr(sym[left].begin, sym[left].len + sym[right].len);
    const int32_t id = find(joined);
    if (id < 0) return;
    queue.push({left, right, scores_[id], joined.size()});
    rev_merge[std::move(joined)] = {left, right};
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
  merge_pairs(sym, queue, try_add);
  // A symbol that is a token is written as that token; one that is not is
  // split back into the pair it was merged from, down to bytes.
  std::vector<int> stack;
  for (int i = sym.empty() ? -1 : 0; i != -1; i = sym[i].next) {
    stack.push_back(i);
    while (!stack.empty()) {
      const Symbol& s = sym[stack.back()];
      stack.pop_back();
      const std::string piece = text.substr(s.begin, s.len);
      if (const int32_t id = find(piece); id >= 0) {
        out.push_back(id);
        continue;
      }
      auto m = rev_merge.find(piece);
      if (m == rev_merge.end()) {
        // Byte fallback; a character whose bytes are not all tokens is one <unk>.
        bool bytes = true;
        for (unsigned char c : piece) bytes = bytes && byte_ids_[c] >= 0;
        if (bytes)
          for (unsigned char c : piece) out.push_back(byte_ids_[c]);
        else
          out.push_back(unknown_for(piece));
        continue;
      }
      stack.push_back(m->second.second);
      stack.push_back(m->second.first);
    }
  }
}

namespace {

struct BpeBigram {
  int left, right;
  int32_t rank;
  size_t len;
  // The queue's top: the lowest rank, then the leftmost pair.
  bool operator<(const BpeBigram& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
};

}  // namespace

// llama.cpp's byte-level merge loop (llm_tokenizer_bpe_session), word by word.
void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym;
  std::priority_queue<BpeBigram> queue;
  std::string key;
  for (const std::string& raw : pre_tokenize(text, static_cast<PreTokenizer>(pre_))) {
    const std::string word = byte_encode(raw);
    if (ignore_merges_) {
      if (const int32_t id = find(word); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    split_characters(word, sym);
    auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      key.assign(word, sym[left].begin, sym[left].len);
      key += ' ';
      key.append(word, sym[right].begin, sym[right].len);
      auto it = ranks_.find(key);
      if (it == ranks_.end()) return;
      queue.push({left, right, it->second, sym[left].len + sym[right].len});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
    merge_pairs(sym, queue, try_add);
    for (int i = sym.empty() ? -1 : 0; i != -1; i = sym[i].next) {
      const std::string_view piece(word.data() + sym[i].begin, sym[i].len);
      if (const int32_t id = find(piece); id >= 0) {
        out.push_back(id);
        continue;
      }
      // Not a token: each of its bytes that is one (llama.cpp's fallback).
      for (unsigned char c : piece)
        if (byte_ids_[c] >= 0) out.push_back(byte_ids_[c]);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                                       const std::vector<std::pair<size_t, size_t>>& plain, size_t limit) const {
  // A token stands for at most longest_ bytes of text (its stored text is
  // never shorter than what it covers: byte-level BPE maps a byte to one or
  // two, SentencePiece a space to three), so a prefix of (limit + 1) x
  // longest_ bytes already holds more than `limit` tokens.
  if (limit < SIZE_MAX / longest_ - 1 && text.size() > (limit + 1) * longest_)
    text = text.substr(0, (limit + 1) * longest_);
  if (model_ == Model::Characters) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < text.size();) {
      if (byte_ids_[0] >= 0 && types_[0] == TokenType::Byte) {  // the byte vocabulary
        out.push_back(byte_ids_[static_cast<unsigned char>(text[i++])]);
        continue;
      }
      const size_t n = std::min<size_t>(utf8_len(static_cast<unsigned char>(text[i])), text.size() - i);
      const int32_t id = find(text.substr(i, n));
      TS_CHECK(id >= 0, "Tokenizer: the character '", std::string(text.substr(i, n)), "' at byte ", i,
               " is not in the model's vocabulary of ", size(), " characters");
      out.push_back(id);
      i += n;
    }
    return out;
  }
  // Fragments of raw text (id -1) and special tokens found in it.
  struct Fragment {
    int32_t id;
    size_t begin, len;
  };
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  for (int32_t id : special_) {
    const bool control = types_[id] == TokenType::Control || types_[id] == TokenType::Unknown;
    if (!parse_special && control) continue;
    const std::string& s = tokens_[id];
    auto in_plain = [&](size_t m) {
      for (const auto& [b, e] : plain)
        if (m < e && m + s.size() > b) return true;
      return false;
    };
    std::vector<Fragment> next;
    for (const Fragment& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.begin;
      const size_t end = f.begin + f.len;
      const uint8_t strip = strip_.empty() ? 0 : strip_[id];
      for (size_t m, from = pos; (m = text.substr(0, end).find(s, from)) != std::string_view::npos;) {
        if (control && in_plain(m)) {  // user text: these characters stay characters
          from = m + 1;
          continue;
        }
        size_t left_end = m;
        if (strip & kStripLeft)
          while (left_end > pos && is_space(text[left_end - 1])) --left_end;
        if (left_end > pos) next.push_back({-1, pos, left_end - pos});
        next.push_back({id, m, s.size()});
        pos = m + s.size();
        if (strip & kStripRight)
          while (pos < end && is_space(text[pos])) ++pos;
        from = pos;
      }
      if (pos < end) next.push_back({-1, pos, end - pos});
    }
    frags = std::move(next);
  }

  std::vector<int32_t> out;
  // Never two BOS: one written in the text stands for the one the model adds.
  const bool text_has_bos = !frags.empty() && frags[0].id >= 0 && frags[0].id == bos_;
  if (add_special && add_bos_ && !text_has_bos) out.push_back(bos_);
  bool prev_special = true;
  for (const Fragment& f : frags) {
    if (f.id >= 0) {
      out.push_back(f.id);
      prev_special = true;
      continue;
    }
    if (model_ == Model::Bpe) {
      encode_bpe(text.substr(f.begin, f.len), out);
      prev_special = false;
      continue;
    }
    std::string raw = add_space_prefix_ && prev_special ? " " : "";
    raw += text.substr(f.begin, f.len);
    encode_spm(escape_spaces(raw), out);
    prev_special = false;
  }
  if (add_special && add_eos_) out.push_back(eos_);
  return out;
}

// ---- decoding ---------------------------------------------------------------

std::string Tokenizer::piece(int32_t id, bool unparse_special, bool lstrip) const {
  check_id(id, "piece");
  std::string s;
  switch (types_[id]) {
    case TokenType::Control:
    case TokenType::Unknown:
      if (unparse_special) s = tokens_[id];
      break;
    case TokenType::UserDefined: s = tokens_[id]; break;
    case TokenType::Normal: s = model_ == Model::Bpe ? byte_decode(tokens_[id]) : unescape_spaces(tokens_[id]); break;
    case TokenType::Byte: {
      const int b = byte_of(tokens_[id]);
      if (b >= 0) s = std::string(1, static_cast<char>(b));
      break;
    }
    default: break;  // undefined and unused tokens write nothing, as in llama.cpp
  }
  if (lstrip && !s.empty() && s[0] == ' ') s.erase(0, 1);
  return s;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool remove_special, bool unparse_special) const {
  size_t begin = 0, end = ids.size();
  // llama.cpp's rule: the space the encoder put in front is dropped, except
  // after a leading BOS that is removed.
  bool strip = add_space_prefix_;
  if (remove_special && add_bos_ && end > begin && ids[begin] == bos_) {
    strip = false;
    ++begin;
  }
  if (remove_special && add_eos_ && end > begin && ids[end - 1] == eos_) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    out += piece(ids[i], unparse_special, strip);
    strip = false;
  }
  return clean_spaces_ ? clean_spaces(out) : out;
}

std::string StreamDecoder::next(int32_t id) {
  pending_ += t_.piece(id, unparse_special_);
  // Hold back a trailing character whose bytes have not all arrived.
  size_t keep = 0;
  for (size_t back = 1; back <= std::min<size_t>(4, pending_.size()); ++back) {
    const unsigned char c = static_cast<unsigned char>(pending_[pending_.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    if (c >= 0xC0 && c < 0xF8 && utf8_len(c) > back) keep = back;
    break;
  }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = pending_.empty() ? "" : "\xef\xbf\xbd";  // U+FFFD for an unfinished character
  pending_.clear();
  return out;
}

void check_same_vocabulary(const Tokenizer& model, const Tokenizer& draft) {
  auto kind = [](const Tokenizer& t) {
    return t.model() == Tokenizer::Model::Bpe ? "byte-level BPE"
           : t.model() == Tokenizer::Model::SentencePiece ? "SentencePiece" : "characters";
  };
  TS_CHECK(model.model() == draft.model(), "the draft model's tokenizer is ", kind(draft), ", the model's ",
           kind(model), "; a draft must share the model's vocabulary");
  TS_CHECK(model.size() == draft.size(), "the draft model's vocabulary has ", draft.size(), " tokens, the model's ",
           model.size(), "; a draft must share the model's vocabulary");
  for (int32_t i = 0; i < model.size(); ++i)
    TS_CHECK(model.text(i) == draft.text(i) && model.type(i) == draft.type(i), "token ", i, " of the draft model ('",
             draft.text(i), "') is not the model's ('", model.text(i), "'); a draft must share the model's vocabulary");
  TS_CHECK(model.bos() == draft.bos() && model.eos() == draft.eos(), "the draft model's BOS and EOS (", draft.bos(),
           ", ", draft.eos(), ") are not the model's (", model.bos(), ", ", model.eos(), ")");
}

}  // namespace tessera::llm
