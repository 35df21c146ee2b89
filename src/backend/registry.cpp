// The backends of this build, and registering one. The registration is the
// one place outside a backend's folder that includes its header.
#include "backend/backend.h"

#include "backend/cpu/backend.h"
#include "backend/meta/backend.h"

namespace tessera::backend {

namespace detail {
// The built-in backends need no registration call: their records are
// constants, so they exist before any static initializer runs an op.
constinit const Backend* g_backends[kNumDeviceTypes] = {&cpu::kBackend, &meta::kBackend, nullptr};

const Backend& no_backend(DeviceType t) {
  TS_ERROR("device ", device_type_name(t), " is not available in this build (devices: cpu, meta)");
}
}  // namespace detail

std::vector<std::string> missing_entries(const Backend& b) {
  std::vector<std::string> missing;
  if (!b.name) missing.push_back("name");
  if (!b.allocator) missing.push_back("allocator");
  else {
    if (!b.allocator->allocate) missing.push_back("allocator.allocate");
    if (!b.allocator->deallocate) missing.push_back("allocator.deallocate");
    if (!b.allocator->stats) missing.push_back("allocator.stats");
    if (!b.allocator->reset_peak) missing.push_back("allocator.reset_peak");
  }
  if (!b.copy_from_cpu) missing.push_back("copy_from_cpu");
  if (!b.copy_to_cpu) missing.push_back("copy_to_cpu");
  if (!b.synchronize) missing.push_back("synchronize");
  if (!b.default_generator) missing.push_back("default_generator");
  if (!b.kernels) missing.push_back("kernels");
  else {
#define TS_X(name, type) \
  if (!b.kernels->name) missing.push_back("kernels." #name);
    TS_BACKEND_KERNELS(TS_X)
#undef TS_X
  }
  return missing;
}

const LlmKernels& llm_kernels(DeviceType t) {
  const Backend& b = get(t);
  const LlmKernels* l = b.llm ? b.llm() : nullptr;
  TS_CHECK(l != nullptr, "the LLM engine needs a backend with LLM kernels; ", b.name, " has none (cpu has)");
  return *l;
}

void register_backend(const Backend& b) {
  std::vector<std::string> missing = missing_entries(b);
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    TS_ERROR("register_backend: the backend '", b.name ? b.name : "(unnamed)", "' for device ",
             device_type_name(b.type), " lacks ", missing.size(), " entr", missing.size() == 1 ? "y" : "ies",
             ": ", list, " (docs/adding_a_backend.md lists what a backend provides)");
  }
  TS_CHECK(b.type != DeviceType::kCount, "register_backend: '", b.name, "' names no device type");
  detail::g_backends[static_cast<int>(b.type)] = &b;
  set_device_allocator(b.type, b.allocator);
}

}  // namespace tessera::backend
