// Perplexity as llama-perplexity computes it (include/tessera/llm/perplexity.h).
#include "tessera/llm/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera::llm {

PerplexityResult perplexity(Engine& engine, std::span<const int32_t> tokens, const PerplexityOptions& o,
                            const std::function<void(int64_t, double)>& on_chunk) {
  const int64_t n_ctx = o.context, n = static_cast<int64_t>(tokens.size());
  TS_CHECK(n_ctx >= 2, "perplexity: a context of ", n_ctx, " tokens scores nothing; give at least 2");
  TS_CHECK(n >= 2 * n_ctx, "perplexity: the text is ", n, " tokens; a context of ", n_ctx, " needs at least ",
           2 * n_ctx, " (a longer text, or a smaller -c)");
  const EngineOptions& eo = engine.options();
  const int64_t first = n_ctx / 2;
  TS_CHECK(eo.context == 0 || eo.context >= n_ctx, "perplexity: the engine holds ", eo.context,
           " positions; a chunk needs ", n_ctx);
  const int64_t batch = eo.max_batch_tokens;
  TS_CHECK(eo.max_logit_rows >= std::min(batch, n_ctx - first), "perplexity: the engine returns ", eo.max_logit_rows,
           " logit rows a step; a chunk needs ", std::min(batch, n_ctx - first));
  const int64_t V = engine.model().spec().vocab;
  int64_t chunks = n / n_ctx;
  if (o.chunks >= 0) chunks = std::min(chunks, o.chunks);

  PerplexityResult r;
  const auto t0 = std::chrono::steady_clock::now();
  double nll = 0, nll2 = 0;
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
  std::vector<float> logits;  // rows for positions first .. n_ctx - 1
  logits.reserve(static_cast<size_t>((n_ctx - first) * V));
  for (int64_t c = 0; c < chunks; ++c) {
    std::copy_n(tokens.begin() + c * n_ctx, n_ctx, chunk.begin());
    if (o.bos >= 0) chunk[0] = o.bos;
    const int64_t seq = engine.add_sequence();
    logits.clear();
    for (int64_t p = 0; p < n_ctx; p += batch) {
      const int64_t len = std::min(batch, n_ctx - p);
      const int64_t rows = std::max<int64_t>(0, p + len - std::max(p, first));  // the step's rows at first or later
      Chunk step{seq, std::span<const int32_t>(chunk.data() + p, static_cast<size_t>(len)), rows};
      const std::span<const float> l = engine.step({&step, 1});
      if (rows > 0) logits.insert(logits.end(), l.end() - rows * V, l.end());
    }
    engine.remove_sequence(seq);
    for (int64_t j = first; j < n_ctx - 1; ++j) {
      const float* row = logits.data() + (j - first) * V;
      const float mx = *std::max_element(row, row + V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v] - mx));
      const double lp = static_cast<double>(row[chunk[static_cast<size_t>(j + 1)]] - mx) - std::log(sum);
      nll -= lp;
      nll2 += lp * lp;
    }
    r.scored += n_ctx - 1 - first;
    r.chunks = c + 1;
    r.running.push_back(std::exp(nll / static_cast<double>(r.scored)));
    if (on_chunk) on_chunk(c, r.running.back());
  }
  const double count = static_cast<double>(r.scored);
  const double mean = nll / count;
  r.perplexity = std::exp(mean);
  const double var = nll2 / count - mean * mean;
  r.error = var > 0 && count > 1 ? std::sqrt(var / (count - 1)) * r.perplexity : 0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace tessera::llm
