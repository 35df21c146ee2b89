#pragma once
// What the Llama and GPT bridges share (llama_gguf.cpp, gpt_gguf.cpp): a
// model's GGUF tensors under the module's names, and moving weights between
// a module and a file. Reading and checking a file's hyperparameters and
// tensors is the inference stack's (read_model_spec, model_spec.h).
#include <string>
#include <vector>

#include "tessera/llm/gguf.h"
#include "tessera/llm/model_spec.h"
#include "tessera/llm/tokenizer.h"
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

// GGUF's name stems to a module's ("attn_q" -> "self_attn.q_proj").
using NameMap = std::vector<std::pair<std::string, std::string>>;

// The module's parameter for each of the spec's GGUF tensors (gguf_tensors,
// model_spec.h, the one list of a model's tensors): a name's stem (before
// ".weight" or ".bias") is looked up in `top`, or, after "blk.N.", in `layer`
// and put after layer_prefix + "N."; the suffix is kept. rope_freqs.weight,
// which no module holds, is left out.
std::vector<TensorName> parameter_names(const ModelSpec& s, const NameMap& top, const NameMap& layer,
                                        const std::string& layer_prefix);

// The export options' weight type, checked: F32, F16, BF16, Q8_0 or Q4_0
// (K-quants come from convert_gguf, which keeps matrices whose rows are not
// whole super-blocks). Returns its general.file_type.
int64_t export_file_type(GgmlType type);

// The module's parameters into a writer: 2-D ones in `type`, 1-D ones (and
// those named in keep_f32) in F32; `reorder` rewrites a rope_heads tensor.
// vocab_rows >= 0: the token embedding's and the output's first rows only (a
// vocabulary padded past the tokenizer's, as tensor parallelism pads it).
void add_parameters(GgufWriter& w, const nn::Module& model, const std::vector<TensorName>& names, GgmlType type,
                    const std::vector<std::string>& keep_f32 = {}, Tensor (*reorder)(const Tensor&, int64_t) = nullptr,
                    int64_t vocab_rows = -1);
// The rows of the vocabulary to write: the tokenizer's size when it is
// smaller than the model's (padding), else the model's; an error when larger.
int64_t exported_vocab(const char* what, int64_t model_vocab, const Tokenizer* tokenizer);

// The file's tensors into the module's parameters, dequantized to f32 and
// checked finite; `reorder` undoes add_parameters' for rope_heads tensors.
void load_parameters(const GgufFile& f, nn::Module& model, const std::vector<TensorName>& names,
                     Tensor (*reorder)(const Tensor&, int64_t) = nullptr);

}  // namespace tessera::llm::detail
