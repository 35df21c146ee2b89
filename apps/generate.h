#pragma once
// `tessera generate`: its flags and the command (apps/generate.cpp).
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "tessera/llm/sampler.h"

namespace tessera::cli {

struct GenerateFlags {
  CLI::App* cmd = nullptr;
  std::string model, prompt, kv_memory, kv_type = "f16";
  int64_t max_tokens = 128, context = 0, batch = 512;
  int threads = 0;
  llm::SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

void add_generate_command(CLI::App& app, GenerateFlags& f);
int cmd_generate(const GenerateFlags& f);

}  // namespace tessera::cli
