// The recorder hook and the invoker table (one invoker per op of ops.def).
#include "tessera/ops/capture.h"

#include <string>
#include <unordered_map>

#include "ops/op_utils.h"
#include "tessera/ops/op_table.h"

namespace tessera::ops {
namespace {

__attribute__((tls_model("initial-exec"))) constinit thread_local Recorder* t_recorder = nullptr;

using Invoker = TensorList (*)(const TensorList&, const Attrs&);
constexpr Invoker kInvokers[] = {
#define OP(name, ...) &invoke_##name,
#include "ops/ops.def"
#undef OP
};
static_assert(sizeof(kInvokers) / sizeof(kInvokers[0]) == static_cast<size_t>(OpId::kCount));

// Reads of tensor values from user code go to the recorder (core's hook).
void on_host_read(const Tensor& t) {
  if (t_recorder) t_recorder->host_read(t);
}
// An op recorded an autograd node of its own (autograd's hook).
void on_grad_node() {
  if (t_recorder) t_recorder->grad_node();
}

}  // namespace

Recorder* recorder() { return t_recorder; }

RecorderGuard::RecorderGuard(Recorder* r) : prev_(t_recorder) {
  t_recorder = r;
  trace::t_host_read = r ? &on_host_read : nullptr;
  autograd::detail::t_on_record = r ? &on_grad_node : nullptr;
}
RecorderGuard::~RecorderGuard() {
  t_recorder = prev_;
  trace::t_host_read = prev_ ? &on_host_read : nullptr;
  autograd::detail::t_on_record = prev_ ? &on_grad_node : nullptr;
}

TensorList invoke(OpId op, const TensorList& inputs, const Attrs& attrs) {
  auto i = static_cast<size_t>(op);
  TS_CHECK(i < static_cast<size_t>(OpId::kCount), "invoke: op id ", i, " is not an op of this build");
  return kInvokers[i](inputs, attrs);
}

std::optional<OpId> op_id(std::string_view name) {
  static const std::unordered_map<std::string_view, OpId> ids = [] {
    std::unordered_map<std::string_view, OpId> m;
    for (int i = 0; i < op_count(); ++i) m.emplace(op_table()[i].name, static_cast<OpId>(i));
    return m;
  }();
  auto it = ids.find(name);
  if (it == ids.end()) return std::nullopt;
  return it->second;
}

std::string_view op_name(OpId op) {
  auto i = static_cast<int>(op);
  return i >= 0 && i < op_count() ? op_table()[i].name : std::string_view("<invalid op>");
}

}  // namespace tessera::ops
