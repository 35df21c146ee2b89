#pragma once
// Crafted model files, each wrong in one way that a careless loader turns
// into a crash, a wrapped size or a huge allocation: overflowing and negative
// shapes, cycles, dangling names, wrong initializer sizes, external data,
// unknown ops and domains, attributes out of range, huge repeat counts.
// test_hostile_models.cpp checks that each is a clear error; the fuzz corpus
// (tests/fuzz/model/) holds them as seeds.
#include <string>
#include <vector>

namespace tessera::testing {

struct HostileModel {
  std::string name;      // file name: name.onnx, or the directory name.tsr
  bool onnx;             // an ONNX file, or a compiled graph (graph.json + weights.safetensors)
  std::string bytes;     // the ONNX file
  std::string graph;     // graph.json (compiled graphs)
  std::string weights;   // weights.safetensors (compiled graphs)
  std::string expected;  // a fragment of the error that names the fault
};

std::vector<HostileModel> hostile_models();
// The valid models the hostile ones are edited from (each loads and runs).
std::vector<HostileModel> valid_models();

// Writes a model where `tessera run` and `tessera::load` read it (a file or a
// directory under `dir`); returns its path.
std::string write_model(const HostileModel& m, const std::string& dir);

// The model as one fuzz input of the "model" target (tests/fuzz/targets.h).
std::string fuzz_input(const HostileModel& m);

}  // namespace tessera::testing
