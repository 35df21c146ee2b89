#pragma once
// Training checkpoints. A checkpoint is a directory:
//   model.safetensors      the model's state_dict
//   optimizer.safetensors  the optimizer's state tensors; its param groups in
//                          the __metadata__ key "param_groups" (JSON)
//   state.json             step, epoch, scheduler, RNG and data-loader state,
//                          the config, the last metrics, format_version
// save_checkpoint() writes it under a temporary name, fsyncs every file and the
// directory, then renames it into place and points root/latest at it. A crash,
// a kill or a full disk at any moment leaves the previous checkpoint intact.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/io/safetensors.h"

namespace tessera::io {

constexpr int kCheckpointFormatVersion = 1;

struct Checkpoint {
  NamedTensors model;
  NamedTensors optimizer;
  nlohmann::json optimizer_groups;  // Optimizer::state_dict().groups
  nlohmann::json state;             // becomes state.json (format_version is added)
};

// Writes root/name and returns its path; keeps the newest `keep_last`
// checkpoints under root (0 = keep all).
std::string save_checkpoint(const std::string& root, const std::string& name, const Checkpoint& c, int keep_last = 0);
// Loads a checkpoint directory; errors name the missing or invalid file.
Checkpoint load_checkpoint(const std::string& dir);
// "latest" (or "last") -> the newest complete checkpoint under root; a
// directory path -> itself. Errors say where it looked.
std::string resolve_checkpoint(const std::string& spec, const std::string& root);
// Complete checkpoints under root, oldest first.
std::vector<std::string> list_checkpoints(const std::string& root);

}  // namespace tessera::io
