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
//
// A sharded checkpoint (ZeRO: each rank holds pieces of the parameters and of
// the optimizer state) is written by every rank at once:
//   state.json                       as above, with "sharded": {"world_size": N}
//   model-rank00003.safetensors      rank 3's pieces of the model's tensors
//   optimizer-rank00003.safetensors  and of the optimizer's state
//   index.json                       every tensor's dtype, shape and pieces
//                                    (file and place); every file's bytes and CRC32
// A piece is a whole tensor, elements [begin, end) of the flattened tensor
// (ZeRO's flat chunks), or an N-d box: an offset and a shape per dimension
// (tensor-parallel rows or columns). A tensor's pieces are ranges or boxes,
// and cover it exactly once.
// load_checkpoint() checks every file's size and CRC32, then assembles the
// whole tensors, so a sharded checkpoint loads at any world size and stage,
// and in every tool that reads checkpoints; CheckpointReader reads ranges of
// tensors without the rest (a ZeRO rank resuming).
#include <functional>
#include <map>
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

struct CheckpointPiece {
  std::string name;
  Tensor data;         // the whole tensor, a 1-D range of its elements, or a box of it
  Shape shape;         // the whole tensor's shape
  int64_t begin = -1;  // the range's first element; -1: data is the whole tensor (or a box)
  // A box (a row- or column-parallel piece): where data's corner sits in the
  // whole tensor, one offset per dimension; data's shape is the box's.
  std::vector<int64_t> offset = {};
};
struct CheckpointShard {
  std::vector<CheckpointPiece> model, optimizer;
  nlohmann::json optimizer_groups;  // the whole optimizer's groups (as Optimizer::state_dict's)
};
// Collective over the job: every rank calls it with its pieces, `barrier`
// waits for all of them (the directory must be shared). Ranks write their
// files in parallel; then rank 0 checks that the pieces cover every tensor,
// writes index.json and state.json (c.state; c's tensors are ignored) and
// switches root/latest. Returns the directory.
std::string save_sharded_checkpoint(const std::string& root, const std::string& name, int rank, int world,
                                    const CheckpointShard& mine, const Checkpoint& c, int keep_last,
                                    const std::function<void()>& barrier);
// Loads a checkpoint directory, whole or sharded; errors name the missing,
// truncated or corrupt (CRC32) file.
Checkpoint load_checkpoint(const std::string& dir);

// A checkpoint's tensors by name, whole or a range of elements of the
// flattened tensor at a time, without assembling the rest: the safetensors
// files are memory-mapped and a read touches only the pieces that overlap it.
// A sharded checkpoint's shard file is checked (size, CRC32) when a read first
// needs it, so a ZeRO rank resuming at the world size it saved at reads only
// its own shards. Not thread-safe (files are opened on first use).
class CheckpointReader {
 public:
  enum Part { kModel = 0, kOptimizer = 1 };
  // Reads state.json and, for a sharded checkpoint, checks index.json.
  explicit CheckpointReader(const std::string& dir);
  const std::string& dir() const { return dir_; }
  const nlohmann::json& state() const { return state_; }
  const nlohmann::json& optimizer_groups() const { return groups_; }
  // Tensor names in the order load_checkpoint lists them.
  const std::vector<std::string>& names(Part part) const { return names_[part]; }
  bool contains(Part part, const std::string& name) const { return entries_[part].count(name) != 0; }
  const Shape& shape(Part part, const std::string& name) const { return entry(part, name).shape; }
  // Every tensor's name and shape, in names() order (what Module::fit takes).
  std::vector<std::pair<std::string, Shape>> shapes(Part part) const {
    std::vector<std::pair<std::string, Shape>> out;
    for (const std::string& n : names_[part]) out.emplace_back(n, shape(part, n));
    return out;
  }
  DType dtype(Part part, const std::string& name) const { return entry(part, name).dtype; }
  // The whole tensor, in its shape.
  Tensor read(Part part, const std::string& name) const;
  // Elements [begin, begin + count) of the flattened tensor, 1-D.
  Tensor read(Part part, const std::string& name, int64_t begin, int64_t count) const;
  // The box at `offset` of shape `shape` (one per dimension), reading only
  // the pieces it overlaps when the tensor is stored in boxes.
  Tensor read_box(Part part, const std::string& name, IntArrayRef offset, IntArrayRef shape) const;
  // Checks every shard file now (read_all does; a ZeRO resume does not need to).
  void check_files() const;
  // Every file checked, every tensor whole: what load_checkpoint returns.
  Checkpoint read_all() const;

  // Where a piece of a tensor is stored: elements [begin, end) of the
  // flattened tensor, or, with a non-empty box, the box at `offset`.
  struct Piece {
    std::string file;
    int64_t begin = 0, end = 0;
    std::vector<int64_t> offset = {}, box = {};
    std::string key = {};  // its name in the file when not the tensor's ("name#1": a rank's second piece of it)
  };
  // Empty when the pieces cover a tensor of `shape` exactly once (all ranges
  // or all boxes, each inside it); else what is wrong.
  static std::string tiling_error(std::vector<Piece> pieces, const Shape& shape);

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    std::vector<Piece> pieces;
    bool boxes = false;  // stored in boxes (else in element ranges)
  };
  const Entry& entry(Part part, const std::string& name) const;
  Tensor piece_data(const Entry& e, const std::string& name, const Piece& p) const;
  const SafetensorsFile& open(const std::string& file) const;
  std::string dir_;
  nlohmann::json state_, groups_, files_json_;  // files_json_: a sharded index's "files"
  std::vector<std::string> names_[2];
  std::map<std::string, Entry> entries_[2];
  mutable std::map<std::string, SafetensorsFile> files_;
};
// The newest checkpoint under root that loads, and its contents; a newer one
// that does not (a missing or corrupt shard) is skipped with a line on stderr
// naming it and why. Errors when none loads.
std::pair<std::string, Checkpoint> load_newest_valid_checkpoint(const std::string& root);
// The checkpoints a resume from "latest" tries, in order: the newest complete
// one, then the others newest first. Errors when there is none.
std::vector<std::string> resume_candidates(const std::string& root);
// "latest" (or "last") -> the newest complete checkpoint under root; a
// directory path -> itself. Errors say where it looked.
std::string resolve_checkpoint(const std::string& spec, const std::string& root);
// Complete checkpoints under root, oldest first.
std::vector<std::string> list_checkpoints(const std::string& root);

}  // namespace tessera::io
