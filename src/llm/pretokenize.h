#pragma once
// Byte-level BPE's pre-tokenizers: text is cut into words by a regular
// expression over Unicode categories before merges run inside each word.
// Each is written out as a scan over code points, as llama.cpp writes them
// (unicode.cpp), so words break where llama.cpp breaks them; categories come
// from ICU (docs/dependencies.md).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::llm {

enum class PreTokenizer {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Gpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,
  // Llama3's expression with \p{N} (one digit per word) for \p{N}{1,3}
  Qwen2,
  // \p{N} (every digit its own word), then Gpt2 (StarCoder, Refact, Command-R, SmolLM)
  DigitsThenGpt2,
};

// The pre-tokenizer a GGUF's tokenizer.ggml.pre names (llama.cpp's names), or
// an error naming the ones Tessera knows.
PreTokenizer pre_tokenizer_from_name(std::string_view name, const std::string& what);
// The canonical name written back to GGUF.
const char* pre_tokenizer_name(PreTokenizer p);

// The text's code points, as llama.cpp reads them: a byte that does not start
// a well-formed sequence becomes U+FFFD and the scan moves on one byte.
std::vector<uint32_t> utf8_code_points(std::string_view text);
void append_utf8(uint32_t cpt, std::string& out);

// The words of `text` (their UTF-8 bytes, re-encoded from the code points).
std::vector<std::string> pre_tokenize(std::string_view text, PreTokenizer p);

}  // namespace tessera::llm
