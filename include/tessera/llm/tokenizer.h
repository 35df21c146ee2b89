#pragma once
// Tokenizers from a GGUF file's tokenizer.ggml.* metadata, giving the ids
// llama.cpp gives for the same file and text.
//
// SentencePiece BPE (tokenizer.ggml.model "llama": Llama 1/2, Mistral, Phi-3
// and the models Tessera trains): spaces become U+2581, a space is put in
// front of the text (add_space_prefix), then the pair of adjacent pieces
// whose joined text is the highest-scoring token is merged until no pair is
// a token; what is left that is not a token is written as its bytes
// (<0xXX> tokens, "byte fallback").
//
// Byte-level BPE (tokenizer.ggml.model "gpt2": GPT-2, Llama 3, Qwen 2,
// StarCoder...): each byte is written as one printable character (GPT-2's
// byte-to-Unicode table), the text is cut into words by the pre-tokenizer
// tokenizer.ggml.pre names (llm/pretokenize.h), and inside each word the
// adjacent pair with the lowest rank in tokenizer.ggml.merges is merged until
// no pair is listed.
//
// Special tokens (control, user-defined, unknown) are found in the text
// first, longest first. Control and unknown ones only where the caller says
// the text may hold them (parse_special: a chat template's own text, never a
// user's message); user-defined ones always, as llama.cpp does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::llm {

class GgufFile;
class GgufWriter;

// GGUF's tokenizer.ggml.token_type values.
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

class Tokenizer {
 public:
  // Characters: the vocabulary of a character- or byte-level model that
  // `tessera train` made (each token one UTF-8 character, or one byte).
  enum class Model { SentencePiece, Bpe, Characters };

  static Tokenizer from_gguf(const GgufFile& f);
  // A SentencePiece .model file (BPE, trained with the identity normalizer:
  // spm_train --model_type=bpe --normalization_rule_name=identity
  // --remove_extra_whitespaces=false); anything else is an error naming it.
  static Tokenizer from_sentencepiece_file(const std::string& path);
  static Tokenizer from_sentencepiece(const uint8_t* data, size_t size, const std::string& what);
  // A .gguf file's tokenizer or a SentencePiece .model file, by the file's first bytes.
  static Tokenizer from_file(const std::string& path);
  // A SentencePiece-style vocabulary given directly (tests, Tessera's own models).
  static Tokenizer sentencepiece(std::vector<std::string> tokens, std::vector<float> scores,
                                 std::vector<TokenType> types, int32_t bos, int32_t eos, int32_t unk,
                                 bool add_bos = true, bool add_eos = false, bool add_space_prefix = true);

  // A byte-level BPE vocabulary given directly: tokens in GPT-2's byte
  // encoding, merges as "left right", the pre-tokenizer by its GGUF name.
  static Tokenizer bpe(std::vector<std::string> tokens, std::vector<TokenType> types, std::vector<std::string> merges,
                       std::string_view pre, int32_t bos, int32_t eos, bool add_bos = false, bool add_eos = false);

  // A character-level vocabulary (each entry one UTF-8 character), or the 256
  // bytes when `chars` is empty. No BOS or EOS; a character outside the
  // vocabulary is an error naming it.
  static Tokenizer characters(std::vector<std::string> chars);

  // Writes the vocabulary as tokenizer.ggml.* keys, as from_gguf reads them.
  void to_gguf(GgufWriter& w) const;

  // Text to ids. add_special: the BOS (and EOS) the model asks for; a BOS
  // already at the start (from parse_special text) is not added again.
  // parse_special: control tokens written in the text become those tokens.
  // plain: byte ranges [begin, end) of `text` where no special token is
  // matched even with parse_special (the messages inside a chat template).
  // limit: a text of more than `limit` tokens gives more than `limit` ids,
  // not all of them (a prefix's: its last ids may differ from the whole
  // text's), in time and memory bounded by `limit`, not by the text.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true, bool parse_special = false,
                              const std::vector<std::pair<size_t, size_t>>& plain = {},
                              size_t limit = SIZE_MAX) const;
  // Ids to text. remove_special: leave out a leading BOS and trailing EOS;
  // unparse_special: write control tokens' text (otherwise they write nothing).
  std::string decode(const std::vector<int32_t>& ids, bool remove_special = true, bool unparse_special = false) const;
  // One token's bytes as decode writes them (lstrip: drop one leading space).
  std::string piece(int32_t id, bool unparse_special = false, bool lstrip = false) const;
  // The first control token whose text `text` holds (-1: none): text that
  // would turn into control tokens if a template wrote it outside a message.
  int32_t control_token_in(std::string_view text) const;

  Model model() const { return model_; }
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& text(int32_t id) const;  // the vocabulary entry, as stored
  TokenType type(int32_t id) const;
  int32_t bos() const { return bos_; }  // -1 where the model has none
  int32_t eos() const { return eos_; }
  // Whether generation ends at this token: EOS, and the end-of-turn tokens
  // llama.cpp recognizes by their text (<|eot_id|>, <|im_end|>, <|end|>, ...).
  bool is_end_of_generation(int32_t id) const;
  int32_t unk() const { return unk_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // The id of a token's exact text, or -1.
  int32_t find(std::string_view text) const;

 private:
  void build();
  void apply_llama_cpp_fixes(const std::string& model_name);
  void check_id(int32_t id, const char* what) const;
  void encode_spm(std::string text, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void set_merges(std::vector<std::string> merges);
  void set_pre(std::string_view pre, const std::string& what);
  int32_t unknown_for(const std::string& piece) const;

  Model model_ = Model::SentencePiece;
  std::vector<std::string> tokens_;
  size_t longest_ = 1;  // bytes of the longest token's text: no token stands for more input
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<int32_t> special_;  // control, user-defined and unknown tokens, longest text first
  std::vector<int32_t> end_of_generation_;
  std::vector<uint8_t> strip_;    // per token: kStripLeft / kStripRight, the spaces a special token eats
  int32_t byte_ids_[256];
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = true, add_eos_ = false, add_space_prefix_ = true;
  // Byte-level BPE only.
  std::vector<std::string> merges_;                // as in the file, for to_gguf
  std::unordered_map<std::string, int32_t> ranks_;  // "left right" -> its line in merges_
  std::string pre_name_;
  int pre_ = 0;                // llm::PreTokenizer
  bool ignore_merges_ = false;  // a word that is a token is that token (Llama 3)
  bool clean_spaces_ = false;   // decode drops the space before . , ! ? and contractions
};

// A draft model's tokenizer must be its model's: the same kind, the same
// entries with the same types, the same BOS and EOS. An error names the
// first difference.
void check_same_vocabulary(const Tokenizer& model, const Tokenizer& draft);

// Decodes a stream of ids into text that never ends inside a UTF-8
// character: the bytes of an unfinished one wait for the next token.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t, bool unparse_special = false) : t_(t), unparse_special_(unparse_special) {}
  // The complete characters this token finishes (maybe none).
  std::string next(int32_t id);
  // What is left at the end (an incomplete character's bytes, as U+FFFD).
  std::string finish();

 private:
  const Tokenizer& t_;
  bool unparse_special_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace tessera::llm
