#include "tessera/train/run.h"

#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/llm/gpt_gguf.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/llm/lora.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/quant/weights.h"

namespace tessera::train {

std::string checkpoint_dir(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(path) / "state.json")) return path;
  if (fs::is_directory(fs::path(path) / "checkpoints")) return io::resolve_checkpoint("latest", path + "/checkpoints");
  return io::resolve_checkpoint("latest", path);
}

LoadedRun load_run(const std::string& path, bool model_only) {
  LoadedRun l;
  l.dir = checkpoint_dir(path);
  l.ckpt = io::load_checkpoint(l.dir);
  TS_CHECK(l.ckpt.state.contains("config"), l.dir, "/state.json has no config: cannot rebuild the model");
  l.recipe = build_recipe(l.ckpt.state["config"], l.dir + "/state.json (config)", model_only);
  if (l.ckpt.state.contains("quantization"))
    quant::quantize_weights(*l.recipe.model, quant::weight_quant_config_from_json(l.ckpt.state["quantization"]));
  try {
    l.recipe.model->load_state_dict(nn::StateDict{l.ckpt.model}, true);
  } catch (const Error& e) {
    TS_ERROR("checkpoint ", l.dir, " does not fit the model its config describes: ", e.what());
  }
  if (l.ckpt.state.contains("quantization")) quant::check_quantized_weights(*l.recipe.model);
  return l;
}

LanguageModel load_language_model(const std::string& path, llm::GgmlType weights, const char* verb,
                                  llm::TensorSplit split) {
  LanguageModel lm;
  lm.what = path;
  if (llm::is_gguf_file(path)) {
    lm.model = llm::Model::load(path, split);
    lm.tokenizer = llm::Tokenizer::from_gguf(lm.model->file());
    const llm::GgufValue* t = lm.model->file().find("tokenizer.chat_template");
    lm.chat_template = t && t->type() == llm::GgufType::String ? t->as_string() : "";
    return lm;
  }
  TS_CHECK(std::filesystem::exists(path), verb, ": ", path, " does not exist (a .gguf file, or a run or "
           "checkpoint of tessera train)");
  TS_CHECK(!std::filesystem::is_regular_file(path), verb, ": ", path, " is not a GGUF file (it does not begin with "
           "'GGUF'), and a run or checkpoint of tessera train is a folder");
  LoadedRun l = load_run(path);
  const Recipe& r = l.recipe;
  TS_CHECK(r.task == Task::LanguageModel && !r.text_level.empty(), verb, ": ", l.dir, " is not a language "
           "model trained on text (its data has no vocabulary to write text with)");
  if (auto* gpt = dynamic_cast<nn::zoo::GPT*>(r.model.get())) {
    lm.model = llm::model_from_gpt(*gpt, weights);
  } else if (auto* llama = dynamic_cast<nn::zoo::Llama*>(r.model.get())) {
    if (llm::has_lora(*llama)) llm::merge_lora(*llama);  // a LoRA run: its base with the adapter merged in
    lm.model = llm::model_from_llama(*llama, weights);
  } else {
    TS_ERROR(verb, ": ", l.dir, " holds a ", r.model_name, "; the engine runs llama and gpt models");
  }
  if (split.size > 1) lm.model = llm::Model::from_gguf(lm.model->file(), split);  // its part, from the whole
  lm.tokenizer = r.tokenizer ? *r.tokenizer
                 : llm::Tokenizer::characters(r.text_level == "byte" ? std::vector<std::string>{} : r.vocab);
  lm.what = l.dir;
  return lm;
}

}  // namespace tessera::train
