// libFuzzer targets for every parser of outside input (safetensors, .npy, tar
// shards, YAML, ONNX models, compiled graph.json, KServe infer requests). Built by scripts/fuzz.sh
// (clang, -fsanitize=fuzzer,address,undefined) as one binary per target:
// TESSERA_FUZZ_TARGET selects the parser. A parser may reject its input only
// with tessera::Error (serve::RequestError for requests); anything else (a crash, a sanitizer report, another
// exception type, a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "tessera/compile/onnx.h"
#include "tessera/compile/serialize.h"
#include "tessera/core/error.h"
#include "tessera/data/shards.h"
#include "tessera/io/config.h"
#include "tessera/io/npy.h"
#include "tessera/io/safetensors.h"
#include "tessera/serve/protocol.h"

using namespace tessera;

namespace {
void parse(const char* p, size_t n) {
#if TESSERA_FUZZ_TARGET == 1
  auto f = io::SafetensorsFile::parse(p, n, "fuzz");
  for (auto& name : f.names()) {
    Tensor t = f.get(name);
    if (t.numel() > 0) (void)t.contiguous();
  }
#elif TESSERA_FUZZ_TARGET == 2
  Tensor t = io::parse_npy(p, n, "fuzz");
  (void)t.numel();
#elif TESSERA_FUZZ_TARGET == 3
  for (auto& e : data::parse_tar(p, n, "fuzz")) (void)e.data.size();
#elif TESSERA_FUZZ_TARGET == 4
  nlohmann::json j = io::parse_yaml(std::string(p, n), "fuzz");
  if (j.is_object()) (void)io::Config(j).keys();
#elif TESSERA_FUZZ_TARGET == 5
  // Import runs the model once while capturing it: shapes and attributes from
  // the file reach the ops, whose checks must reject what is wrong.
  compile::Graph g = compile::import_onnx_bytes(std::string(p, n), "fuzz");
  (void)g.num_nodes();
#elif TESSERA_FUZZ_TARGET == 6
  compile::Graph g = compile::graph_from_json(std::string(p, n), [](const std::string&) { return zeros({2}); }, "fuzz");
  (void)compile::dump(g);
#elif TESSERA_FUZZ_TARGET == 7
  // The first byte picks JSON (even) or the binary extension (odd, the next
  // two bytes the JSON header's length); the rest is the body.
  if (n < 3) return;
  std::optional<size_t> json_length;
  if (p[0] & 1) json_length = static_cast<size_t>(static_cast<uint8_t>(p[1]) | (static_cast<uint8_t>(p[2]) << 8));
  auto r = serve::parse_infer_request(std::string_view(p + 3, n - 3), json_length);
  for (auto& in : r.inputs) (void)in.data.numel();
#else
#error "define TESSERA_FUZZ_TARGET"
#endif
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    parse(reinterpret_cast<const char*>(data), size);
  } catch (const Error&) {
    // a clean rejection
  } catch (const serve::RequestError&) {
    // a clean rejection of a request
  }
  return 0;
}
