#pragma once
// The operator list (src/ops/ops.def) as data: every property of every op,
// declared once, in its row. The compiler, the exporter, the profiler, the
// docs and the table test (tests/ops/test_op_table.cpp) read them here;
// nothing keeps a list of ops of its own.
#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/core/shape.h"

#include "tessera/ops/attrs.h"
#include "tessera/ops/autocast.h"

namespace tessera::ops {

enum class OpId : uint16_t;

enum class GradSupport : uint8_t { kGradGrad, kFused, kFirstOnly, kNone };
// Whether an output can share memory with input 0.
enum class Alias : uint8_t {
  kFresh,     // always new memory
  kView,      // always a view of input 0's storage
  kMayAlias,  // input 0 itself or a view of it when there is nothing to do (contiguous, reshape, ...)
};
enum class Rng : uint8_t {
  kNoRng,
  kRng,             // draws from the default generator on every call
  kRngWhenDropout,  // draws when training with p > 0 (dropout) or dropout_p > 0 (attention)
};
enum class OutShape : uint8_t {
  kStatic,             // output sizes follow from input sizes and attributes
  kFromData,           // from the input values (masked_select, nonzero, unique)
  kFromDataWhenAttr,   // one_hot with num_classes == -1
};
// How compile/inspect.cpp counts an op's FLOPs (ops/flops.cpp).
enum class Flops : uint8_t {
  kFlopNone,           // views, copies, gathers, factories
  kFlopPerOutput,      // one per output element
  kFlopPerInput,       // one per input element (reductions, norms, pooling, losses)
  kFlopMatmul,         // 2 * output elements * the reduced dimension
  kFlopConv,           // 2 * output elements * (C / groups) * kernel size
  kFlopConvTranspose,  // 2 * input elements * (C_out / groups) * kernel size
  kFlopAttention,      // 2 * L * S * (E + Ev) per batch and head
  kFlopCustom,         // its own formula in ops/flops.cpp
};
// The memory layouts an op computes on (compile/layout.cpp).
enum class Layout : uint8_t {
  kPlain,         // ordinary strided tensors
  kBlocked,       // also channel-blocked [N, C/b, H, W, b] tensors, by attribute
  kLayoutChange,  // converts between the two (channel_blocks)
};
enum class Fusion : uint8_t {
  kOpaque,
  kPointwise,     // becomes an instruction of a fused elementwise kernel (ops::elementwise_kernel)
  kEpilogueHost,  // a GEMM or convolution that takes an activation and a residual in its epilogue
};
// ONNX export (compile/onnx_export.cpp) and import (compile/onnx_import.cpp).
enum class OnnxKind : uint8_t {
  kNone,          // not exportable
  kOp,            // one node of `type`, read back as this op
  kComposite,     // several nodes, or a node that depends on the attributes
  kIdentity,      // an Identity node (nothing to compute in inference)
  kCompilerMade,  // made by a compiler pass; exported before the pass runs
};
struct Onnx {
  OnnxKind kind;
  std::string_view type;
};
// How static int8 quantization (quant/ptq.cpp) treats the op.
enum class Ptq : uint8_t {
  kPtqFloat,            // computes in f32 on dequantized inputs
  kPtqLayer,            // becomes an int8 layer (conv2d, linear)
  kPtqPassCodes,        // passes u8 codes through unchanged (max_pool2d, reshape)
  kPtqFusedActivation,  // folded into the int8 layer before it (relu)
  kPtqNoCompute,        // moves data only; not counted as f32 compute
  kPtqInt8,             // the int8 ops themselves
};
// Properties few ops have: a bit set.
enum Tag : uint32_t {
  kNoTags = 0,
  kFactory = 1u << 0,               // makes a tensor from attributes alone (folded only when small)
  kStatefulWhenTraining = 1u << 1,  // updates its inputs when training (batch_norm's running stats)
  kInPlaceResidual = 1u << 2,       // may write its output over input 3 (fused_conv2d's f32 residual)
  kEpilogueActivation = 1u << 3,    // an activation a GEMM or convolution epilogue can apply
  kKeepsZeroChannels = 1u << 4,     // maps a channel of zeros to zeros, channels apart (pruning)
  kChannelProducer = 1u << 5,       // a layer whose pruned output channels can be removed
  kFoldsBatchNorm = 1u << 6,        // a layer a following batch_norm folds into
  kSparseLinear = 1u << 7,          // becomes sparse_linear when its weight is sparse enough
  kCollective = 1u << 8,            // communicates: every rank runs it, in order (never folded or dropped)
};

// A tensor signature parsed from its ops.def text ("x weight bias?", "parts*").
struct Arity {
  int min = 0, max = 0;  // counts allowed
  bool variadic = false;  // one list of any length
  int required = 0;       // the first `required` may not be undefined
};
constexpr Arity parse_arity(std::string_view s) {
  Arity a;
  bool optional_seen = false;
  for (size_t i = 0; i < s.size();) {
    while (i < s.size() && s[i] == ' ') ++i;
    if (i == s.size()) break;
    size_t j = i;
    while (j < s.size() && s[j] != ' ') ++j;
    const char last = s[j - 1];
    if (last == '*') {
      a.variadic = true;
    } else if (last == '?') {
      optional_seen = true;
      ++a.max;
    } else {
      if (optional_seen) throw "ops.def: a required tensor follows an optional one";
      ++a.min;
      ++a.max;
      ++a.required;
    }
    i = j;
  }
  return a;
}

struct OpEntry {
  std::string_view name, family;
  GradSupport grad;
  std::string_view inputs, outputs;  // the signatures as written
  Arity in, out;
  Alias alias;
  Rng rng;
  OutShape shape;
  Flops flops;
  Layout layout;
  Fusion fusion;
  autocast::Policy amp;
  Onnx onnx;
  Ptq ptq;
  uint32_t tags;
  bool has(Tag t) const { return (tags & t) != 0; }
};

// Every op, in ops.def order; op_entry(id) is op_table()[id].
const OpEntry* op_table();
int op_count();
const OpEntry& op_entry(OpId op);

// The declared properties that depend on a call's attributes, read as the
// rows say (a graph node's op and attributes):
// its result is not a function of its inputs and attributes (rng column);
bool is_random(OpId op, const Attrs& attrs);
// it must run even when its outputs are unused (kStatefulWhenTraining, kCollective);
bool has_side_effects(OpId op, const Attrs& attrs);
// its output sizes depend on its input values (shape column).
bool data_dependent_shape(OpId op, const Attrs& attrs);

// FLOPs of one call from its input and output shapes (an undefined input: an
// empty shape) and attributes, by the op's FLOP class (ops/flops.cpp).
int64_t op_flops(OpId op, const std::vector<Shape>& inputs, const std::vector<Shape>& outputs, const Attrs& attrs);

}  // namespace tessera::ops
