#pragma once
// `tessera serve-llm`: its flags and the command (apps/serve_llm.cpp).
#include <CLI/CLI.hpp>
#include <signal.h>

#include <functional>
#include <string>

#include "generate.h"

namespace tessera::cli {

struct ServeLlmFlags {
  CLI::App* cmd = nullptr;
  std::string model, name, host = "127.0.0.1", api_key_file, kv_memory, kv_type = "f16", weights = "f32";
  std::string chat_template, pooling;
  int port = 8000, threads = 0, connections = 64, max_client_connections = 256;
  int64_t context = 0, max_seqs = 16, max_batched_tokens = 512, max_waiting = 256, kv_block = 16;
  bool no_prefix_caching = false;
  double decode_slowdown = 0;
  int64_t prompt_lookup = 0;
  std::string draft;
  std::vector<std::string> lora;  // NAME=PATH
  int64_t draft_tokens = 8;
  int64_t draft_threads = 1;
  int tensor_parallel = 1;
};

// Reads a model named on the command line (MODEL, --draft): with a split,
// this rank's part of it (llm::Model::load).
using LanguageModelLoader = std::function<LanguageModel(const std::string&, llm::TensorSplit)>;

void add_serve_llm_command(CLI::App& app, ServeLlmFlags& f);
// Serves until SIGINT/SIGTERM: the HTTP server starts first (/health is 503
// while `load` reads the model), then the model is loaded and served.
// With --tensor-parallel T, under `tessera launch -n T`: rank 0 serves, the
// other ranks run their parts of the model as rank 0's engine asks.
int cmd_serve_llm(const ServeLlmFlags& f, const LanguageModelLoader& load);
// The API key in a file (its first line, trailing spaces dropped; at least 16 characters).
std::string read_api_key(const std::string& path, const char* verb);
// Blocks SIGINT and SIGTERM in this thread and the threads it starts after,
// so that the main thread alone takes them, with sigwait on the set returned.
sigset_t block_stop_signals();

}  // namespace tessera::cli
