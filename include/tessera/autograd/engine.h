#pragma once
// The backward engine and the functional gradient API.
#include "tessera/autograd/node.h"

namespace tessera::autograd {

// Runs backward from `outputs`, seeding them with `grad_outputs` (undefined
// entries mean ones, allowed only for scalar outputs). Accumulates into leaves.
void backward(const TensorList& outputs, const TensorList& grad_outputs = {}, bool retain_graph = false,
              bool create_graph = false);

// Returns d(outputs)/d(inputs) without touching .grad. With allow_unused, an
// input the outputs do not depend on gets an undefined tensor; otherwise that
// is an error.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                std::optional<bool> retain_graph = {}, bool create_graph = false, bool allow_unused = false);

// Runs `fn` once the outermost backward() or grad() running on this thread has
// finished (a checkpoint's recompute runs a nested one), after every hook, in
// the order queued; a callback may queue more. Call it from a hook while
// backward runs: data parallelism waits for its all-reduces here. If backward
// fails, the queued callbacks are dropped.
void queue_callback(std::function<void()> fn);

}  // namespace tessera::autograd
