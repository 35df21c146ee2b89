#pragma once
// What the Llama and GPT GGUF converters share (llama_gguf.cpp,
// gpt_gguf.cpp): the list of a model's tensors under both names, checking a
// file holds exactly those, and moving weights between a module and a file.
#include <string>
#include <vector>

#include "tessera/llm/gguf.h"
#include "tessera/nn/module.h"

namespace tessera::llm::detail {

// One tensor of a model: its parameter name, its GGUF name, its row-major
// shape, and (llama's query and key weights) the heads whose rows GGUF
// orders differently (0 otherwise).
struct TensorName {
  std::string param, gguf;
  Shape shape;
  int64_t rope_heads = 0;
};

// A count from the file between 1 and 2^31 - 1 (an error naming the key
// and the value otherwise).
uint32_t u32_of(const GgufFile& f, const std::string& key);
// The file's layer count under `key`, checked against the tensors it holds
// (each layer has `per_layer` of them) before anything proportional to the
// claim is built: a header claiming 2^31 layers is refused at once.
uint32_t layer_count(const GgufFile& f, const std::string& key, int64_t per_layer, const std::string& arch);

// Every tensor in `names` is in the file in its shape, and there is no other
// (`arch` names the architecture in errors; `hint` is added to the error for
// a tensor Tessera does not read, given its name).
void check_tensors(const GgufFile& f, const std::vector<TensorName>& names, const std::string& arch,
                   int64_t layers, std::string (*hint)(const std::string& tensor) = nullptr);

// The export options' weight type, checked: F32, F16, BF16, Q8_0 or Q4_0
// (K-quants come from convert_gguf, which keeps matrices whose rows are not
// whole super-blocks). Returns its general.file_type.
int64_t export_file_type(GgmlType type);

// The module's parameters into a writer: 2-D ones in `type`, 1-D ones (and
// those named in keep_f32) in F32; `reorder` rewrites a rope_heads tensor.
void add_parameters(GgufWriter& w, const nn::Module& model, const std::vector<TensorName>& names, GgmlType type,
                    const std::vector<std::string>& keep_f32 = {}, Tensor (*reorder)(const Tensor&, int64_t) = nullptr);

// The file's tensors into the module's parameters, dequantized to f32 and
// checked finite; `reorder` undoes add_parameters' for rope_heads tensors.
void load_parameters(const GgufFile& f, nn::Module& model, const std::vector<TensorName>& names,
                     Tensor (*reorder)(const Tensor&, int64_t) = nullptr);

}  // namespace tessera::llm::detail
