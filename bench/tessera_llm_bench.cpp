// The LLM engine's side of bench/llm_compare.py.
//
//   tessera_llm_bench make-model --size S|M [--kv-heads N] --type Q8_0 --vocab VOCAB.gguf --out F.gguf [--seed 1]
//       a random-weight Llama shaped like stories15M (S) or a 110M model (M),
//       with the tokenizer of VOCAB.gguf, written as GGUF by Tessera
//   tessera_llm_bench run --model F.gguf --threads N --measure prefill|decode|batch|bandwidth [--tokens N] [--seqs N] [--spread N] [--repeat R]
//       one measurement, as a JSON line: tokens/s (llama-bench's way: the mean
//       of R timed runs after a warm-up) and the RSS growth past the loaded model
//       (bandwidth: a streaming read of as many bytes as a decoded token's weights, GB/s)
//   tessera_llm_bench run --model F.gguf --threads N --measure mixed --seqs D --tokens C [--past P] [--at A] [--logits L]
//       a step of D decodes at P tokens of context, one of a C-token prompt chunk
//       from position A, and both in one step: median ms of each (how much a
//       prompt chunk beside running streams costs them); the chunk returns its
//       last L rows' logits (L = C: a speculative verify step)
//   tessera_llm_bench eval --model F.gguf --config CFG.yaml --tokenizer T.model [--windows 16] [--greedy 64]
//                          [--threads N] --out R.json
//       perplexity over the first windows of the config's held-out data (the
//       split `tessera train` evaluates on) and a greedy continuation of the
//       first window's first 16 tokens, with each step's top-two margin; the
//       windows are written out so llama.cpp evaluates the same tokens
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/generator.h"
#include "tessera/core/parallel.h"
#include "tessera/llm/convert_gguf.h"
#include "tessera/llm/engine.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/io/config.h"
#include "tessera/io/file.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/train/recipe.h"

#include "stream_read.h"

using namespace tessera;

namespace {

std::string arg(int argc, char** argv, const char* name, const char* def = nullptr) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], name)) return argv[i + 1];
  if (!def) {
    std::fprintf(stderr, "missing %s\n", name);
    std::exit(2);
  }
  return def;
}

// Resident set size now, from /proc/self/statm (bytes).
int64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * 4096;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

volatile float sink_f;  // keeps the streaming read

int make_model(int argc, char** argv) {
  const std::string size = arg(argc, argv, "--size");
  nn::zoo::LlamaConfig c;
  c.vocab_size = 32000, c.norm_eps = 1e-5, c.rope_theta = 10000;
  if (size == "S") c.dim = 288, c.n_layers = 6, c.n_heads = 6, c.hidden_dim = 768, c.max_seq_len = 256;
  else if (size == "M") c.dim = 768, c.n_layers = 12, c.n_heads = 12, c.hidden_dim = 2048, c.max_seq_len = 1024;
  else return std::fprintf(stderr, "--size is S or M\n"), 2;
  c.n_kv_heads = std::stoll(arg(argc, argv, "--kv-heads", std::to_string(c.n_heads).c_str()));
  const llm::Tokenizer tok = llm::Tokenizer::from_gguf(llm::GgufFile::open(arg(argc, argv, "--vocab")));
  c.vocab_size = tok.size();
  manual_seed(std::stoull(arg(argc, argv, "--seed", "1")));
  nn::zoo::Llama model(c);
  llm::GgufExportOptions o;
  const llm::GgmlType type = *llm::ggml_type_from_name(arg(argc, argv, "--type"));
  o.type = type;
  o.tokenizer = &tok;
  o.name = "tessera-random-llama-" + size;
  if (type != llm::GgmlType::Q4_K && type != llm::GgmlType::Q6_K) {
    llm::save_llama_gguf(model, arg(argc, argv, "--out"), o);
    return 0;
  }
  // K-quants as `tessera quantize-gguf` writes them, from the F32 file.
  o.type = llm::GgmlType::F32;
  const std::string image = llm::llama_to_gguf(model, o).bytes();
  llm::convert_gguf(llm::GgufFile::parse(image.data(), image.size(), "F32 image"), type).save(arg(argc, argv, "--out"));
  return 0;
}

// --measure mixed: what a prompt chunk costs beside running decodes. seqs
// sequences hold --past tokens each; one more holds --at tokens of a long
// prompt. Median milliseconds of a step of the decodes alone, of a chunk of
// n prompt tokens alone, and of both in one step (each sequence cut back
// after every step, so all steps see the same contexts).
int mixed(llm::Engine& e, const std::vector<int32_t>& prompt, int64_t seqs, int64_t n, int argc, char** argv) {
  const int64_t past = std::stoll(arg(argc, argv, "--past", "256"));
  const int64_t at = std::stoll(arg(argc, argv, "--at", "0"));
  const int64_t reps = std::stoll(arg(argc, argv, "--repeat", "15"));
  std::vector<int32_t> text(static_cast<size_t>(std::max(past, at + n) + 1));
  for (size_t i = 0; i < text.size(); ++i) text[i] = prompt[i % prompt.size()];
  auto sequence_of = [&](int64_t tokens) {  // a new sequence holding text[0, tokens)
    const int64_t s = e.add_sequence();
    for (int64_t p = 0; p < tokens; p += 512) {
      llm::Chunk c{s, {text.data() + p, static_cast<size_t>(std::min<int64_t>(512, tokens - p))}, 0};
      e.step({&c, 1});
    }
    return s;
  };
  std::vector<llm::Chunk> dec;
  for (int64_t i = 0; i < seqs; ++i) dec.push_back({sequence_of(past), {text.data() + past, 1}, 1});
  const int64_t lp = sequence_of(at);
  const int64_t logits = std::min<int64_t>(n, std::stoll(arg(argc, argv, "--logits", "1")));  // a verify step: every row's
  const llm::Chunk chunk{lp, {text.data() + at, static_cast<size_t>(n)}, logits};
  auto median_ms = [&](bool decodes, bool prompt_chunk) {
    std::vector<llm::Chunk> cs;
    if (decodes) cs = dec;
    if (prompt_chunk) cs.push_back(chunk);
    std::vector<double> ms;
    for (int64_t r = 0; r < reps; ++r) {
      const double a = now();
      e.step(cs);
      ms.push_back((now() - a) * 1e3);
      for (const auto& c : cs) e.truncate_sequence(c.seq, c.seq == lp ? at : past);
    }
    std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
    return ms[reps / 2];
  };
  median_ms(true, true);  // warm
  const double d = median_ms(true, false), c = median_ms(false, true), both = median_ms(true, true);
  std::printf("{\"measure\": \"mixed\", \"decodes\": %lld, \"past\": %lld, \"chunk\": %lld, \"at\": %lld, "
              "\"decodes_ms\": %.3f, \"chunk_ms\": %.3f, \"both_ms\": %.3f}\n",
              static_cast<long long>(seqs), static_cast<long long>(past), static_cast<long long>(n),
              static_cast<long long>(at), d, c, both);
  return 0;
}

int run(int argc, char** argv) {
  set_num_threads(std::stoi(arg(argc, argv, "--threads", "1")));
  const std::string measure = arg(argc, argv, "--measure");
  const int64_t n = std::stoll(arg(argc, argv, "--tokens", "64"));
  const int64_t seqs = std::stoll(arg(argc, argv, "--seqs", "16"));
  const int64_t context = std::stoll(arg(argc, argv, "--ctx", "1024"));
  auto model = llm::Model::load(arg(argc, argv, "--model"));
  if (measure == "bandwidth") {
    // The machine's read speed on as many bytes as a decoded token's weights:
    // the bound decode at this many threads works against (fastest of 5).
    // In huge pages where the kernel grants them, as the engine's repacked
    // weights are (llm::Model): the machine's best streaming read.
    const int64_t n = model->bytes_per_token_read() / 4;
    constexpr size_t kHuge = size_t{1} << 21;
    const size_t bytes = (static_cast<size_t>(n) * 4 + kHuge - 1) / kHuge * kHuge;
    std::unique_ptr<float, decltype(&std::free)> buf(static_cast<float*>(std::aligned_alloc(kHuge, bytes)), &std::free);
    madvise(buf.get(), bytes, MADV_HUGEPAGE);
    std::fill(buf.get(), buf.get() + n, 1.f);
    double best = 0;
    for (int k = 0; k < 5; ++k) {
      const double a = now();
      sink_f = bench::stream_read(buf.get(), n, get_num_threads());
      const double b = now();
      best = std::max(best, 4.0 * static_cast<double>(n) / (b - a) / 1e9);
    }
    std::printf("{\"measure\": \"bandwidth\", \"threads\": %d, \"bytes\": %lld, \"gb_per_s\": %.3f}\n",
                get_num_threads(), static_cast<long long>(4 * n), best);
    return 0;
  }
  // The weights' pages are read once first (llama.cpp's first evaluation does
  // the same), so the RSS growth counts the engine's memory only.
  if (measure != "prefill" && measure != "decode" && measure != "batch" && measure != "mixed")
    return std::fprintf(stderr, "--measure is prefill, decode, batch, mixed or bandwidth, not '%s'\n", measure.c_str()), 2;
  const auto& file = model->file();
  volatile uint8_t sink = 0;
  for (const auto& t : file.tensors())
    for (uint64_t b = 0; b < t.nbytes; b += 4096) sink = sink + static_cast<uint8_t>(file.tensor_data(t)[b]);
  const int64_t rss0 = rss_bytes();
  llm::EngineOptions o;
  o.context = context;
  o.max_sequences = measure == "batch" ? seqs : measure == "mixed" ? seqs + 1 : 1;
  o.max_batch_tokens = std::max<int64_t>(512, o.max_sequences);
  if (measure == "mixed") o.max_logit_rows = o.max_batch_tokens;
  llm::Engine e(model, o);
  std::vector<int32_t> prompt(static_cast<size_t>(n + seqs + 8));  // prompts of 8 start at 0..seqs-1
  // Prompt ids spread over the vocabulary (--spread: within a small one).
  const int64_t spread = std::stoll(arg(argc, argv, "--spread", "20000"));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(100 + (i * 7919) % spread);
  if (measure == "mixed") return mixed(e, prompt, seqs, n, argc, argv);
  // One timed run of the measure, in fresh sequences; returns its seconds.
  // prefill: n prompt tokens in one step (llama-bench's ppN). decode: n steps
  // of one token from an empty sequence (its tgN). batch: seqs prompts of 8
  // tokens, then n steps of one token in each (llama-batched-bench's TG phase
  // with -npp 8 -ntg n -npl seqs: the prompts are not timed).
  auto once = [&]() -> double {
    std::vector<llm::Chunk> cs;
    double t0 = 0;
    if (measure == "prefill") {
      cs.push_back({e.add_sequence(), {prompt.data(), static_cast<size_t>(n)}, 1});
      t0 = now();
      e.step(cs);
    } else if (measure == "decode") {
      int32_t next = prompt[0];
      cs.push_back({e.add_sequence(), {&next, 1}, 1});
      t0 = now();
      for (int64_t i = 0; i < n; ++i) {
        auto l = e.step(cs);
        next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      }
    } else {
      std::vector<int32_t> next(static_cast<size_t>(seqs));
      for (int64_t i = 0; i < seqs; ++i) cs.push_back({e.add_sequence(), {prompt.data() + i, 8}, 1});
      auto l = e.step(cs);
      const int64_t V = model->spec().vocab;
      t0 = now();
      for (int64_t step = 0; step < n; ++step) {
        for (int64_t i = 0; i < seqs; ++i) {
          next[i] = static_cast<int32_t>(std::max_element(l.begin() + i * V, l.begin() + (i + 1) * V) -
                                         (l.begin() + i * V));
          cs[i].tokens = {&next[i], 1};
        }
        l = e.step(cs);
      }
    }
    const double seconds = now() - t0;
    for (const auto& c : cs) e.remove_sequence(c.seq);
    return seconds;
  };
  // As llama-bench: one untimed warm-up run, then --repeat timed runs;
  // tokens/s is the mean of the runs' tokens/s (its avg_ts).
  const int64_t repeat = std::max<int64_t>(1, std::stoll(arg(argc, argv, "--repeat", "1")));
  const int64_t tokens = measure == "batch" ? n * seqs : n;
  once();
  double sum_tps = 0, seconds = 0;
  for (int64_t k = 0; k < repeat; ++k) {
    const double s = once();
    seconds += s;
    sum_tps += static_cast<double>(tokens) / s;
  }
  const double tps = sum_tps / static_cast<double>(repeat);
  std::printf("{\"measure\": \"%s\", \"tokens\": %lld, \"seconds\": %.6f, \"tokens_per_s\": %.3f, \"rss_growth\": %lld, "
              "\"kv_bytes_per_token\": %lld, \"weight_bytes_per_token\": %lld, \"isa\": \"%s\"}\n",
              measure.c_str(), static_cast<long long>(tokens), seconds / static_cast<double>(repeat), tps,
              static_cast<long long>(rss_bytes() - rss0), static_cast<long long>(e.kv_bytes_per_token()),
              static_cast<long long>(model->bytes_per_token_read()), std::getenv("TESSERA_CPU_CAPABILITY") ?
              std::getenv("TESSERA_CPU_CAPABILITY") : "best");
  return 0;
}

// log-softmax of one row, in double.
std::vector<double> log_probs(const float* row, int64_t V) {
  double mx = row[0], z = 0;
  for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
  std::vector<double> out(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) out[v] = row[v] - mx - std::log(z);
  return out;
}

int eval(int argc, char** argv) {
  set_num_threads(std::stoi(arg(argc, argv, "--threads", "1")));
  const int64_t windows = std::stoll(arg(argc, argv, "--windows", "16"));
  const int64_t greedy = std::stoll(arg(argc, argv, "--greedy", "64"));
  const std::vector<char> yaml = io::read_file(arg(argc, argv, "--config"));
  nlohmann::json cfg = io::parse_yaml(std::string(yaml.begin(), yaml.end()), "eval config");
  cfg["data"]["tokenizer"] = arg(argc, argv, "--tokenizer");
  const train::Recipe r = train::build_recipe(cfg, "eval config", false);
  auto model = llm::Model::load(arg(argc, argv, "--model"));
  const int64_t V = model->spec().vocab;
  std::vector<std::vector<int32_t>> wins;
  for (int64_t i = 0; i < windows && i < r.eval_data->size(); ++i) {
    const auto ex = r.eval_data->get(i * std::max<int64_t>(1, r.eval_data->size() / windows));
    std::vector<int32_t> w;
    for (int64_t id : ex.at(0).to_vector<int64_t>()) w.push_back(static_cast<int32_t>(id));
    w.push_back(static_cast<int32_t>(ex.at(1).to_vector<int64_t>().back()));  // the window and its next token
    wins.push_back(std::move(w));
  }
  llm::EngineOptions o;
  o.max_sequences = 1;
  o.max_logit_rows = static_cast<int64_t>(wins.at(0).size());
  o.max_batch_tokens = o.max_logit_rows;
  llm::Engine e(model, o);
  double nll = 0, seconds = 0;
  int64_t count = 0;
  std::string wins_json, nll_json;
  for (const auto& w : wins) {
    const int64_t s = e.add_sequence();
    const int64_t n = static_cast<int64_t>(w.size()) - 1;
    llm::Chunk c{s, {w.data(), static_cast<size_t>(n)}, n};
    const double t0 = now();
    auto logits = e.step({&c, 1});
    seconds += now() - t0;
    double window_nll = 0;
    for (int64_t t = 0; t < n; ++t) window_nll -= log_probs(logits.data() + t * V, V)[w[t + 1]];
    nll += window_nll;
    count += n;
    e.remove_sequence(s);
    wins_json += std::string(wins_json.empty() ? "" : ", ") + "[";
    for (size_t k = 0; k < w.size(); ++k) wins_json += (k ? ", " : "") + std::to_string(w[k]);
    wins_json += "]";
    nll_json += (nll_json.empty() ? "" : ", ") + std::to_string(window_nll);
  }
  // Greedy: the first window's first 16 tokens, then argmax token by token.
  std::vector<int32_t> prompt(wins[0].begin(), wins[0].begin() + 16), out;
  std::string margins;
  const int64_t s = e.add_sequence();
  llm::Chunk c{s, {prompt.data(), prompt.size()}, 1};
  auto l = e.step({&c, 1});
  const double g0 = now();
  for (int64_t i = 0; i < greedy; ++i) {
    const std::vector<double> lp = log_probs(l.data(), V);
    std::vector<double> sorted = lp;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    const int32_t next = static_cast<int32_t>(std::max_element(lp.begin(), lp.end()) - lp.begin());
    out.push_back(next);
    margins += (margins.empty() ? "" : ", ") + std::to_string(sorted[0] - sorted[1]);
    llm::Chunk d{s, {&out.back(), 1}, 1};
    l = e.step({&d, 1});
  }
  const double decode_s = now() - g0;
  std::string prompt_json, out_json;
  for (int32_t t : prompt) prompt_json += (prompt_json.empty() ? "" : ", ") + std::to_string(t);
  for (int32_t t : out) out_json += (out_json.empty() ? "" : ", ") + std::to_string(t);
  const std::string json = "{\"windows\": [" + wins_json + "], \"window_nll\": [" + nll_json + "], \"nll\": " +
                           std::to_string(nll) + ", \"count\": " + std::to_string(count) + ", \"perplexity\": " +
                           std::to_string(std::exp(nll / count)) + ", \"prefill_tokens_per_s\": " +
                           std::to_string(count / seconds) + ", \"decode_tokens_per_s\": " +
                           std::to_string(greedy / decode_s) + ", \"greedy_prompt\": [" + prompt_json +
                           "], \"greedy\": [" + out_json + "], \"margins\": [" + margins + "]}\n";
  std::ofstream(arg(argc, argv, "--out")) << json;
  std::printf("%s: perplexity %.4f over %lld tokens\n", arg(argc, argv, "--model").c_str(), std::exp(nll / count),
              static_cast<long long>(count));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && !std::strcmp(argv[1], "make-model")) return make_model(argc, argv);
    if (argc >= 2 && !std::strcmp(argv[1], "run")) return run(argc, argv);
    if (argc >= 2 && !std::strcmp(argv[1], "eval")) return eval(argc, argv);
    std::fprintf(stderr, "usage: tessera_llm_bench make-model|run|eval ... (see the file's header)\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
