#include "tessera/ops/op_table.h"

namespace tessera::ops {
namespace {

using enum GradSupport;
constexpr OpEntry kOps[] = {
#define OP(name, family, grad) {#name, #family, grad},
#include "ops/ops.def"
#undef OP
};

}  // namespace

const OpEntry* op_table() { return kOps; }
int op_count() { return static_cast<int>(sizeof(kOps) / sizeof(kOps[0])); }

}  // namespace tessera::ops
