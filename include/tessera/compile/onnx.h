#pragma once
// ONNX: export a graph (opset 17, the ONNX IR from Debian's protobuf schema)
// and import models other frameworks exported.
//
// Export maps each node to ONNX operators (some ops become small subgraphs:
// gelu, silu, rms_norm, attention); dynamic dimensions become dim_params on
// the inputs and Shape/Gather arithmetic inside, so the file runs at any size
// of them. The result passes onnx::checker. An op with no ONNX form is an
// error naming the op, the node and the opset.
//
// Import interprets the ONNX graph with Tessera ops and captures it
// (compile/capture.h): shape arithmetic (Shape, Gather, Concat on sizes)
// runs on the host while tracing, and the dim_params of the inputs become
// dynamic dimensions. Files are treated as hostile: sizes, indices and
// attribute types are checked, and nothing in a file is executed.
#include <string>

#include "tessera/compile/graph.h"

namespace tessera::compile {

constexpr int kOnnxOpset = 17;

// The serialized ModelProto; the checker runs on it before it is returned.
std::string onnx_bytes(const Graph& g);
// Writes it atomically.
void export_onnx(const Graph& g, const std::string& path);

Graph import_onnx(const std::string& path);
Graph import_onnx_bytes(const std::string& bytes, const std::string& what = "ONNX model");

}  // namespace tessera::compile
