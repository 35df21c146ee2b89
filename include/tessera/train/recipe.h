#pragma once
// A Recipe is everything a YAML training config describes, built and validated:
// the model (from the zoo, by name), the train and eval datasets, the loss and
// metric (from the task), and functions that make the optimizer and scheduler.
// `tessera train/eval/info` and the C++ Trainer share it; docs/training.md
// lists every key.
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/data/dataloader.h"
#include "tessera/io/config.h"
#include "tessera/nn/module.h"
#include "tessera/optim/optimizer.h"
#include "tessera/optim/scheduler.h"
#include "tessera/train/grad_scaler.h"

namespace tessera::llm {
class Tokenizer;
}

namespace tessera::train {

// "classification": logits [N, C] vs labels [N]; "language_model": logits
// [B, T, V] vs next tokens [B, T] (the metric is perplexity).
enum class Task { Classification, LanguageModel };

struct TrainSettings {
  int64_t epochs = 1;
  int64_t steps = 0;          // if > 0, stop after this many optimizer steps
  int64_t batch_size = 64;
  int64_t eval_batch_size = 256;
  int64_t grad_accum = 1;     // micro-batches per optimizer step
  // A short last batch of an epoch is dropped; else it is trained on (across
  // ranks, filled up by repeating rows from the epoch's start, as PyTorch's
  // DistributedSampler, so a run at N ranks differs from one process there).
  bool drop_last = false;
  double clip_grad_norm = 0;  // 0 = off
  double clip_grad_value = 0;
  uint64_t seed = 0;
  int64_t eval_every = 0;        // steps; 0 = at the end of each epoch
  int64_t eval_batches = 0;      // 0 = the whole eval set
  int64_t checkpoint_every = 0;  // steps; 0 = at the end of each epoch
  int64_t keep_checkpoints = 3;
  int64_t log_every = 50;
  int num_workers = 2;
  int threads = 0;  // 0 = OMP_NUM_THREADS or all cores
  // Mixed precision (docs/amp.md): the forward runs under autocast with this
  // dtype; f16 uses a GradScaler, bf16 only if grad_scaler.enabled is set.
  DType precision = DType::F32;
  GradScalerOptions grad_scaler;
  // Profiling (`tessera train --profile N`): N steps after `profile_warmup`.
  int64_t profile_steps = 0;
  int64_t profile_warmup = 3;
  // Anomaly mode (autograd/anomaly.h) for every step: slow, for debugging.
  bool detect_anomaly = false;
};

// Live metrics for Prometheus (docs/monitoring.md): `monitor: {port: 9400}`.
struct MonitorSettings {
  int port = -1;                  // -1: off; 0: any free port
  std::string host = "127.0.0.1";
  bool layer_stats = false;       // per-layer activation and gradient statistics
  int64_t layer_stats_every = 0;  // steps; 0 = train.log_every
};

// Training across processes (docs/distributed.md): `parallel: {data: 4}`,
// started by `tessera launch -n 4 -- tessera train CONFIG`.
struct ParallelSettings {
  int64_t data = 0;   // ranks of data parallelism; 0: as many as the launcher started
  int64_t zero = 0;   // ZeRO stage 0..3
  bool find_unused_parameters = false;
  bool sync_batch_norm = false;  // batch-norm statistics over the global batch (distributed::SyncBatchNorm)
  double bucket_mb = 25;
  double first_bucket_mb = 1;
  bool overlap = true;  // all-reduce during backward (false: after it, for measuring)
  std::string compression = "none";  // none | bf16 | powersgd (plain data parallelism)
  int64_t powersgd_rank = 1;
  int64_t powersgd_start_step = 1000;
  // Model parallelism (GPT and Llama; distributed/parallel3d.h): data x
  // tensor x pipeline must equal the ranks launched.
  int64_t tensor = 1;              // ranks each layer's weights are split across
  int64_t pipeline = 1;            // stages the layers are cut into, one per rank (times virtual_stages)
  bool sequence_parallel = false;  // norms and dropouts on a block of the sequence (tensor > 1)
  std::string schedule = "1f1b";   // gpipe | 1f1b | interleaved
  int64_t micro_batches = 0;       // per data rank's batch; 0: 2 x pipeline
  int64_t virtual_stages = 1;      // stages per rank (interleaved)
  std::string pipeline_split = "layers";  // layers | parameters | time (each piece's forward, measured)
  bool splits_model() const { return tensor > 1 || pipeline > 1; }
};

struct Recipe {
  nlohmann::json config;  // the full config as given (saved in checkpoints)
  std::string model_name;
  Task task = Task::Classification;
  nn::ModulePtr model;
  data::DatasetPtr train_data, eval_data;
  std::vector<std::string> vocab;  // char-level text: the vocabulary
  std::string text_level;          // "byte" / "char" / "tokens" for text data
  std::shared_ptr<const llm::Tokenizer> tokenizer;  // "tokens": data.tokenizer's (SentencePiece or GGUF)
  TrainSettings train;
  MonitorSettings monitor;
  ParallelSettings parallel;
  std::string output_dir;
  std::function<optim::OptimizerPtr(nn::Module&)> make_optimizer;
  std::function<optim::SchedulerPtr(optim::Optimizer&, int64_t total_steps)> make_scheduler;  // may return null
};

// Builds everything from a config. `what` names the config in errors. With
// model_only, the data is not loaded (for `tessera info`). With shard_model
// (`tessera train`), a config with parallel.zero 3, or a GPT or Llama split
// by parallel.tensor or parallel.pipeline, builds the model on the meta
// device, and the Trainer's ZeRO-3 or Parallel3D materializes only each
// rank's part (Note [Materializing shard by shard] in distributed/zero.cpp,
// Note [Materializing a split model] in distributed/parallel3d.cpp); one
// process materializes it whole. Either way it equals the model built on the CPU.
Recipe build_recipe(const nlohmann::json& config, const std::string& what = "config", bool model_only = false,
                    bool shard_model = false);
Recipe load_recipe(const std::string& yaml_path);

// Just the model part: model: {name: ..., ...args}.
nn::ModulePtr build_model(io::Config& model_config, std::string* name = nullptr);
std::vector<std::string> model_names();

// Applies "a.b.c=value" overrides (value parsed as YAML) to a config.
void apply_override(nlohmann::json& config, const std::string& assignment);

}  // namespace tessera::train
