#pragma once
// The fuzz targets: every parser of outside input (safetensors, .npy, tar
// shards, YAML, ONNX models, compiled graph.json, KServe infer requests, GGUF,
// chat templates, OpenAI requests and the tool calls in replies, a sharded
// checkpoint's index.json) and
// the model loader that imports *and runs* ONNX and compiled graphs. One
// libFuzzer binary per target (fuzz_targets.cpp, scripts/fuzz.sh); the test
// suite replays each target's committed corpus (tests/fuzz/<target>/) through
// the same function. A target may reject its input only with tessera::Error
// (serve::RequestError or serve::openai::ApiError for requests); anything else — a crash, a sanitizer
// report, another exception type, a hang — is a finding.
#include <unistd.h>

#include <barrier>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

#include "tessera/compile/model.h"
#include "tessera/compile/onnx.h"
#include "tessera/compile/serialize.h"
#include "tessera/core/allocator.h"
#include "tessera/core/error.h"
#include "tessera/data/shards.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/config.h"
#include "tessera/io/npy.h"
#include "tessera/io/safetensors.h"
#include "tessera/llm/chat_template.h"
#include "tessera/llm/gguf.h"
#include "tessera/llm/grammar.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/llm/tool_calls.h"
#include "tessera/serve/openai.h"
#include "tessera/serve/protocol.h"

namespace tessera::fuzz {

inline constexpr const char* kTargets[] = {"safetensors", "npy",   "tar",           "yaml", "onnx",
                                           "graph",       "infer_request", "model", "gguf",
                                           "chat_template", "openai_request", "grammar", "checkpoint_index"};

// The largest single tensor a fuzzed model may allocate (peak RSS stays small).
inline constexpr int64_t kModelMaxAllocation = int64_t{64} << 20;

// A model input: the first byte picks ONNX (even) or a compiled graph (odd);
// for a graph, the next 4 bytes (little-endian) are graph.json's length, then
// graph.json, then weights.safetensors.
inline compile::Graph model_graph(const char* p, size_t n) {
  if (n < 1) throw Error("fuzz: empty input");
  if ((p[0] & 1) == 0) return compile::import_onnx_bytes(std::string(p + 1, n - 1), "fuzz.onnx");
  if (n < 5) throw Error("fuzz: a graph input needs a 4-byte length");
  uint32_t len;
  std::memcpy(&len, p + 1, 4);
  if (len > n - 5) throw Error("fuzz: graph.json length past the end");
  io::SafetensorsFile weights = io::SafetensorsFile::parse(p + 5 + len, n - 5 - len, "fuzz");
  return compile::graph_from_parts(std::string(p + 5, len), weights, "fuzz.tsr");
}

// Loads a model (import, optimize, plan) and runs it twice on small random
// inputs, the way `tessera serve` warms a model up.
inline void load_and_run(const char* p, size_t n) {
  struct Cap {  // restored after the run: the test suite replays in one process
    int64_t before = max_allocation();
    Cap() { set_max_allocation(kModelMaxAllocation); }
    ~Cap() { set_max_allocation(before); }
  } cap;
  Model m(model_graph(p, n));
  for (int64_t dynamic : {1, 3}) (void)m.run(m.example_inputs(dynamic, true));
}

// A sharded checkpoint of two ranks (a 3x4 "w" in two pieces, "b" whole, a
// state tensor in two pieces), written once per process by two threads;
// checkpoint_index replaces its index.json with each input.
// tests/fuzz/checkpoint_index/valid.json is the index this writes.
inline std::string checkpoint_fixture() {
  struct Fixture {
    std::filesystem::path root =
        std::filesystem::temp_directory_path() / ("tessera_fuzz_ckpt_" + std::to_string(::getpid()));
    Fixture() {
      std::filesystem::remove_all(root);
      Tensor w = arange(12, DType::F32).reshape({3, 4}), m = full({12}, 0.5);
      io::Checkpoint c;
      c.state = {{"step", 1}};
      std::barrier sync(2);
      auto rank = [&](int r) {
        io::CheckpointShard s;
        s.model.push_back({"w", w.reshape({-1}).narrow(0, 6 * r, 6), {3, 4}, 6 * r});
        s.optimizer.push_back({"state.w.exp_avg", m.narrow(0, 6 * r, 6), {12}, 6 * r});
        if (r == 0) s.model.push_back({"b", arange(3, DType::F32), {3}, -1});
        s.optimizer_groups = nlohmann::json::array({{{"params", {0}}, {"options", {{"lr", 0.1}}}}});
        io::save_sharded_checkpoint(root.string(), "step-1", r, 2, s, c, 0, [&] { sync.arrive_and_wait(); });
      };
      std::thread other(rank, 1);
      rank(0);
      other.join();
    }
    ~Fixture() {
      std::error_code ec;
      std::filesystem::remove_all(root, ec);
    }
  };
  static const Fixture f;
  return (f.root / "step-1").string();
}

inline void run_target(std::string_view target, const char* p, size_t n) {
  if (target == "safetensors") {
    auto f = io::SafetensorsFile::parse(p, n, "fuzz");
    for (auto& name : f.names()) {
      Tensor t = f.get(name);
      if (t.numel() > 0) (void)t.contiguous();
    }
  } else if (target == "npy") {
    (void)io::parse_npy(p, n, "fuzz").numel();
  } else if (target == "tar") {
    for (auto& e : data::parse_tar(p, n, "fuzz")) (void)e.data.size();
  } else if (target == "yaml") {
    nlohmann::json j = io::parse_yaml(std::string(p, n), "fuzz");
    if (j.is_object()) (void)io::Config(j).keys();
  } else if (target == "onnx") {
    // Import runs the model once while capturing it: shapes and attributes
    // from the file reach the ops, whose checks must reject what is wrong.
    (void)compile::import_onnx_bytes(std::string(p, n), "fuzz").num_nodes();
  } else if (target == "graph") {
    compile::Graph g = compile::graph_from_json(std::string(p, n), [](const std::string&) { return zeros({2}); }, "fuzz");
    (void)compile::dump(g);
  } else if (target == "infer_request") {
    // The first byte picks JSON (even) or the binary extension (odd, the next
    // two bytes the JSON header's length); the rest is the body.
    if (n < 3) return;
    std::optional<size_t> json_length;
    if (p[0] & 1) json_length = static_cast<size_t>(static_cast<uint8_t>(p[1]) | (static_cast<uint8_t>(p[2]) << 8));
    auto r = serve::parse_infer_request(std::string_view(p + 3, n - 3), json_length);
    for (auto& in : r.inputs) (void)in.data.numel();
  } else if (target == "model") {
    load_and_run(p, n);
  } else if (target == "gguf") {
    llm::GgufFile f = llm::GgufFile::parse(p, n, "fuzz");
    for (const auto& [key, v] : f.metadata()) (void)v.summary();
    for (const auto& t : f.tensors()) {
      Tensor x = f.tensor(t.name);
      if (x.numel() > 0) (void)x.contiguous();
    }
    if (f.find("tokenizer.ggml.model")) {  // a vocabulary: build it and tokenize with it
      llm::Tokenizer tok = llm::Tokenizer::from_gguf(f);
      for (bool special : {false, true}) (void)tok.decode(tok.encode("Hello <s> w\xc3\xb6rld\xff", true, special));
    }
  } else if (target == "chat_template") {
    // The input is a template; it renders a small conversation with tools
    // under tight limits, as text and through render_chat.
    llm::ChatTemplateLimits lim;
    lim.max_steps = 20000;
    lim.max_output = 1 << 16;
    llm::ChatTemplate t(std::string(p, n), "fuzz", lim);
    const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|end|> there"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
        "function": {"name": "f", "arguments": {"x": 1, "y": [true, null, 2.5]}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "{\"ok\": 1}"}])");
    nlohmann::ordered_json ctx = {{"messages", messages}, {"add_generation_prompt", true}, {"bos_token", "<s>"},
                                  {"eos_token", "</s>"}};
    ctx["tools"] = nlohmann::ordered_json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
    (void)t.render(ctx);
    const llm::Tokenizer bytes = llm::Tokenizer::characters({});
    (void)llm::render_chat(t, messages, false, bytes);
  } else if (target == "openai_request") {
    // The first byte picks a completion (even) or a chat request (odd); the
    // rest is the body, read against a 1,000-token vocabulary. The body is
    // also a model's reply, read by each tool-call format's parser in pieces
    // (forced when the first byte has bit 1).
    if (n < 1) return;
    const std::string_view body(p + 1, n - 1);
    constexpr llm::ToolFormat kFormats[] = {llm::ToolFormat::Hermes, llm::ToolFormat::Mistral,
                                            llm::ToolFormat::MistralArgs, llm::ToolFormat::Llama3};
    for (llm::ToolFormat f : kFormats) {
      llm::ToolCallParser parser(f, p[0] & 2, [] { return std::string("id"); });
      for (size_t at = 0; at < body.size(); at += 7) (void)parser.push(body.substr(at, 7));
      (void)parser.finish();
    }
    serve::openai::GenerationRequest r = (p[0] & 1) ? serve::openai::parse_chat_request(body, 1000)
                                                    : serve::openai::parse_completion_request(body, 1000);
    (void)r.messages.dump();
    if (!r.grammar.empty()) {  // a schema's grammar (or the client's own) compiles and reads its own body
      llm::GrammarMatcher m(llm::Grammar::parse(r.grammar, "root", 100000));
      (void)m.accept(body.substr(0, 256));
    }
    if (!r.tools.empty())  // each format's forced-call grammar compiles
      for (llm::ToolFormat f : kFormats)
        (void)llm::Grammar::parse(llm::forced_tool_call_gbnf(f, r.tools, r.tool_name, true), "root", 100000);
  } else if (target == "grammar") {
    // The input is GBNF; once compiled, a matcher reads the input's own
    // bytes one at a time, and the masks of a byte vocabulary are found.
    auto g = llm::Grammar::parse(std::string_view(p, n), "root", 20000);
    static const llm::Tokenizer bytes = llm::Tokenizer::characters({});
    static const llm::TokenTrie trie(bytes);
    llm::GrammarMatcher m(g);
    for (size_t i = 0; i < std::min<size_t>(n, 64); ++i) {
      (void)m.allowed(trie);
      if (!m.accept(std::string_view(p + i, 1))) break;
    }
    (void)m.can_end();
  } else if (target == "checkpoint_index") {
    // The input is index.json; every tensor it lists is read whole and in a
    // range (only the fixture's files exist, so the rest must be refused).
    const std::string dir = checkpoint_fixture();
    std::ofstream(dir + "/index.json", std::ios::binary | std::ios::trunc).write(p, static_cast<std::streamsize>(n));
    io::CheckpointReader r(dir);
    for (auto part : {io::CheckpointReader::kModel, io::CheckpointReader::kOptimizer})
      for (const std::string& name : r.names(part)) {
        Tensor t = r.read(part, name);
        if (t.numel() > 1) (void)r.read(part, name, 1, t.numel() - 1).contiguous();
      }
  } else {
    throw std::logic_error("fuzz: unknown target " + std::string(target));
  }
}

}  // namespace tessera::fuzz
