#pragma once
// A training run read back from disk: what `tessera export RUN`, `tessera
// generate RUN`, `tessera serve-llm RUN` and tessera.llm.load(RUN) open. A run
// directory means its latest checkpoint; a checkpoint directory itself.
#include <memory>
#include <string>

#include "tessera/io/checkpoint.h"
#include "tessera/llm/gguf.h"
#include "tessera/llm/model.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/train/recipe.h"

namespace tessera::train {

// The checkpoint directory `path` names: itself (it holds state.json), or
// the latest checkpoint of a run (path/checkpoints) or of a checkpoints folder.
std::string checkpoint_dir(const std::string& path);

// A checkpoint's model with its weights, rebuilt from the config in its
// state.json; a quantized checkpoint (state.json "quantization") gets the same
// quantized layers first. model_only: the data is not loaded.
struct LoadedRun {
  std::string dir;  // the checkpoint directory
  io::Checkpoint ckpt;
  Recipe recipe;
};
LoadedRun load_run(const std::string& path, bool model_only = false);

// A language model for the LLM engine (`tessera generate`, `serve-llm`,
// tessera.llm.load): a GGUF file's, with its tokenizer and chat template; or
// a language-model run's Llama or GPT converted to `weights` (a LoRA run: its
// base with the adapter merged in), with the tokenizer it was trained with (a
// subword tokenizer, or its character or byte vocabulary). split: this rank's
// part of a tensor-parallel model. `verb` names the caller in errors.
struct LanguageModel {
  std::shared_ptr<llm::Model> model;
  llm::Tokenizer tokenizer;
  std::string chat_template;  // the GGUF's, or empty
  std::string what;           // the file, or the checkpoint directory
};
LanguageModel load_language_model(const std::string& path, llm::GgmlType weights, const char* verb,
                                  llm::TensorSplit split = {});

}  // namespace tessera::train
