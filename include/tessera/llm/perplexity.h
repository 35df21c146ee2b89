#pragma once
// Perplexity of a text under a model, computed as llama.cpp's
// llama-perplexity computes it, so the two figures compare directly:
// the text's tokens (with the vocabulary's BOS) are cut into chunks of
// `context` tokens, each chunk evaluated from an empty cache with its first
// token replaced by BOS where the vocabulary adds one, and only the second
// half of each chunk scored (every scored token has at least context/2
// tokens before it): the negative log-likelihood of token j+1 from the
// logits at j, for j from context/2 to context-2.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "tessera/llm/engine.h"

namespace tessera::llm {

struct PerplexityOptions {
  int64_t context = 512;  // tokens per chunk (llama-perplexity's -c)
  int64_t chunks = -1;    // at most this many chunks (-1: all the text holds)
  int32_t bos = -1;       // the first token of every chunk (-1: the text's own)
};

struct PerplexityResult {
  double perplexity = 0;
  double error = 0;              // one standard error of the estimate (llama-perplexity's "+/-")
  int64_t chunks = 0, scored = 0;  // chunks evaluated, tokens scored
  std::vector<double> running;   // the estimate after each chunk
  double seconds = 0;
};

// `engine` holds one sequence of at least `context` positions and returns
// logits for at least context/2 rows a step. `on_chunk` (optional) sees the
// running estimate after each chunk. An error when the text has fewer than
// 2 x context tokens (as llama-perplexity's).
PerplexityResult perplexity(Engine& engine, std::span<const int32_t> tokens, const PerplexityOptions& o,
                            const std::function<void(int64_t chunk, double estimate)>& on_chunk = {});

}  // namespace tessera::llm
