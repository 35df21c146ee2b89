#pragma once
// llama.cpp's log-probs through node-llama-cpp (scripts/llm_compat_eval.mjs,
// copied beside the package by scripts/llm_reference.sh), for the tests that
// compare against llama.cpp itself.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tessera::testing {

// For each position of `ids` evaluated from an empty context, the log-prob
// of every vocabulary entry (null where llama.cpp's probability underflowed);
// an empty array, with a failure naming what node printed, when it fails.
inline nlohmann::json llama_cpp_logprobs(const std::string& pkg, const std::string& gguf,
                                         const std::vector<int64_t>& ids, int64_t vocab) {
  std::string list;
  for (size_t i = 0; i < ids.size(); ++i) list += (i ? "," : "") + std::to_string(ids[i]);
  // To files, not a pipe: node's process.exit cuts a pipe's pending output at 64 KiB.
  const std::string out_path = gguf + ".node-stdout", err = gguf + ".node-stderr";
  const std::string cmd = "node '" + pkg + "/llm_compat_eval.mjs' '" + gguf + "' '[" + list + "]' " +
                          std::to_string(vocab) + " >'" + out_path + "' 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  auto slurp = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string out = slurp(out_path);
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (!j.is_array() || j.size() != ids.size()) {
    const std::string log = slurp(err).substr(0, 4000);
    ADD_FAILURE() << cmd << "\nexit status " << status << ", printed " << out.size() << " bytes, " << (j.is_array() ? std::to_string(j.size()) + " rows" : "not a JSON array") << ": " << out.substr(0, 200) << "\nand on stderr: " << log;
    j = nlohmann::json::array();
  }
  std::remove(err.c_str());
  std::remove(out_path.c_str());
  return j;
}

}  // namespace tessera::testing
