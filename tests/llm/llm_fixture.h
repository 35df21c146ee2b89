#pragma once
// A small random Llama over a byte-level SentencePiece vocabulary, for tests
// that run whole requests (generate, the scheduler, the CLI).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/llm/engine.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/nn/zoo/zoo.h"

namespace tessera::testing {

// A byte-level vocabulary over a random Llama, for whole requests (1 layer of
// width 64 unless asked for more).
struct Fixture {
  std::shared_ptr<llm::Model> model;
  llm::Tokenizer tok;
};
inline Fixture fixture(nn::zoo::Llama** keep = nullptr, int64_t layers = 1, int64_t dim = 64, int64_t context = 128) {
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  std::vector<llm::TokenType> types = {llm::TokenType::Unknown, llm::TokenType::Control, llm::TokenType::Control};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    pieces.push_back(name);
    types.push_back(llm::TokenType::Byte);
  }
  for (const char* w : {"\xe2\x96\x81", "a", "b", "c", "ab", "\xe2\x96\x81" "ab", "\xc3\xa9"}) {
    pieces.push_back(w);
    types.push_back(llm::TokenType::Normal);
  }
  std::vector<float> scores(pieces.size(), 0.f);
  llm::Tokenizer tok = llm::Tokenizer::sentencepiece(pieces, scores, types, 1, 2, 0);
  nn::zoo::LlamaConfig c;
  c.vocab_size = tok.size(), c.dim = dim, c.n_layers = layers, c.n_heads = 2, c.n_kv_heads = 2, c.hidden_dim = dim;
  c.max_seq_len = context;
  manual_seed(21);
  static nn::zoo::Llama* m = nullptr;
  delete m;
  m = new nn::zoo::Llama(c);
  if (keep) *keep = m;
  return {llm::model_from_llama(*m), std::move(tok)};
}

// The fixture's vocabulary with token `id` made the normal token `text`
// (a draft model's vocabulary that differs from its model's).
inline llm::Tokenizer with_token(const llm::Tokenizer& tok, int32_t id, const std::string& text) {
  std::vector<std::string> pieces;
  std::vector<llm::TokenType> types;
  for (int32_t i = 0; i < tok.size(); ++i) {
    pieces.push_back(tok.text(i));
    types.push_back(tok.type(i));
  }
  pieces[static_cast<size_t>(id)] = text;
  types[static_cast<size_t>(id)] = llm::TokenType::Normal;
  return llm::Tokenizer::sentencepiece(pieces, std::vector<float>(pieces.size(), 0.f), types, 1, 2, 0);
}

}  // namespace tessera::testing
