#include "tessera/ops/op_table.h"

#include "ops/op_utils.h"

namespace tessera::ops {
namespace {

using enum GradSupport;
using enum Alias;
using enum Rng;
using enum OutShape;
using enum Flops;
using enum Layout;
using enum Fusion;
using enum Ptq;
constexpr autocast::Policy kAmpNone = autocast::Policy::kNone, kAmpLower = autocast::Policy::kLower,
                           kAmpF32 = autocast::Policy::kF32, kAmpPromote = autocast::Policy::kPromote;
#define OnnxOp(type) Onnx{OnnxKind::kOp, #type}
#define OnnxNone Onnx{OnnxKind::kNone, ""}
#define OnnxComposite Onnx{OnnxKind::kComposite, ""}
#define OnnxIdentity Onnx{OnnxKind::kIdentity, "Identity"}
#define OnnxCompilerMade Onnx{OnnxKind::kCompilerMade, ""}

constexpr OpEntry kOps[] = {
#define OP(name, family, grad, inputs, outputs, alias, rng, shape, flops, layout, fusion, amp, onnx, ptq, tags) \
  {#name, #family, grad, inputs, outputs, parse_arity(inputs), parse_arity(outputs), alias, rng, shape, flops,   \
   layout, fusion, amp, onnx, ptq, static_cast<uint32_t>(tags)},
#include "ops/ops.def"
#undef OP
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == static_cast<size_t>(OpId::kCount));

}  // namespace

const OpEntry* op_table() { return kOps; }
int op_count() { return static_cast<int>(sizeof(kOps) / sizeof(kOps[0])); }
const OpEntry& op_entry(OpId op) { return kOps[static_cast<size_t>(op)]; }

bool is_random(OpId op, const Attrs& a) {
  switch (op_entry(op).rng) {
    case Rng::kNoRng: return false;
    case Rng::kRng: return true;
    case Rng::kRngWhenDropout:  // dropout's (training, p) or attention's dropout_p
      return a.has("dropout_p") ? a.f("dropout_p") > 0 : a.b("training") && a.f("p") > 0;
  }
  return true;
}

bool has_side_effects(OpId op, const Attrs& a) {
  const OpEntry& e = op_entry(op);
  return e.has(kCollective) || (e.has(kStatefulWhenTraining) && a.b("training"));
}

bool data_dependent_shape(OpId op, const Attrs& a) {
  switch (op_entry(op).shape) {
    case OutShape::kStatic: return false;
    case OutShape::kFromData: return true;
    case OutShape::kFromDataWhenAttr: return a.i("num_classes") < 0;  // one_hot's count from the data
  }
  return true;
}

}  // namespace tessera::ops
