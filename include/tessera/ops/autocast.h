#pragma once
// Automatic mixed precision: inside an autocast scope, matrix products,
// convolutions and attention run in a 16-bit float (bf16 or f16) while
// softmax, normalizations, losses, reductions and exp/log run in f32.
// Parameters stay f32 (master weights); their 16-bit copies are made once per
// scope and reused (cached by tensor and version) and are differentiable, so
// gradients reach the f32 weights.
//
//   {
//     autocast::Guard amp(DType::BF16);
//     loss = loss_fn(model(x), y);   // matmuls in bf16, loss in f32
//   }
//   loss.backward();                 // outside the scope, as in PyTorch
//
// The op lists are one table in src/ops/autocast.cpp (docs/amp.md). Casting
// happens at the outermost op only: an op in the table runs its body with
// autocast paused, so its internals keep the dtype it chose.
#include "tessera/core/dtype.h"

namespace tessera::autocast {

// What autocast does to an op's floating-point inputs.
enum class Policy : uint8_t {
  kNone,      // left as they are
  kLower,     // f32 inputs cast to the autocast dtype (f64 is left alone)
  kF32,       // 16-bit inputs cast to f32
  kPromote,   // all cast to the widest floating dtype among them
};

struct State {
  bool enabled = false;
  DType dtype = DType::BF16;
};

// Enables autocast (or, with enabled=false, disables it) for its scope on
// this thread. dtype must be bf16 or f16.
class Guard {
 public:
  explicit Guard(DType dtype = DType::BF16, bool enabled = true);
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  State prev_;
  bool counted_;
};

// Weight casts made in its scope are neither cached nor taken from the cache.
// Gradient checkpointing runs its function under it, so the function casts
// the weights it uses itself and can recompute those casts in backward.
class NoCacheGuard {
 public:
  NoCacheGuard();
  ~NoCacheGuard();
  NoCacheGuard(const NoCacheGuard&) = delete;
  NoCacheGuard& operator=(const NoCacheGuard&) = delete;
};

bool enabled();
DType dtype();
State state();
// Number of 16-bit weight copies made since the outermost scope opened (the
// cache's misses), for tests and the profiler.
int64_t cast_count();

}  // namespace tessera::autocast
