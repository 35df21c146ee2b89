#include "tessera/autograd/grad_mode.h"

namespace tessera {
namespace {
// initial-exec: a plain TLS load instead of a __tls_get_addr call per op.
__attribute__((tls_model("initial-exec"))) thread_local bool t_grad_enabled = true;
}
bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }
}  // namespace tessera
