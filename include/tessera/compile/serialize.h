#pragma once
// A compiled graph on disk: a directory with graph.json (the IR: inputs,
// nodes, attributes, symbolic shapes) and weights.safetensors (parameters
// and constants). Loading needs no model code, and executes nothing from the
// file: every op is looked up in ops.def and every field is checked.
#include <string>

#include "tessera/compile/graph.h"
#include "tessera/io/safetensors.h"

namespace tessera::compile {

// Writes dir/graph.json and dir/weights.safetensors (each atomically).
void save(const Graph& g, const std::string& dir);
Graph load_graph(const std::string& dir);

// The JSON text alone, and back (weights by name: "param/<name>", "const/<id>").
std::string graph_json(const Graph& g);
Graph graph_from_json(const std::string& text, const std::function<Tensor(const std::string&)>& weight,
                      const std::string& what = "graph.json");
// A graph from graph.json's text and its weights file, already read (load_graph
// reads both from a directory; the fuzzer hands over bytes).
Graph graph_from_parts(const std::string& text, const io::SafetensorsFile& weights, const std::string& what);

}  // namespace tessera::compile
