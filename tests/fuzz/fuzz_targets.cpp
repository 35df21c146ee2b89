// libFuzzer entry point: one binary per target of targets.h, chosen by
// TESSERA_FUZZ_TARGET (tests/fuzz/CMakeLists.txt). Built by scripts/fuzz.sh
// (clang, -fsanitize=fuzzer,address,undefined).
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tessera::fuzz::run_target(TESSERA_FUZZ_TARGET, reinterpret_cast<const char*>(data), size);
  } catch (const tessera::Error&) {
    // a clean rejection
  } catch (const tessera::serve::RequestError&) {
    // a clean rejection of a request
  } catch (const tessera::serve::openai::ApiError&) {
    // a clean rejection of an OpenAI request
  }
  return 0;
}
