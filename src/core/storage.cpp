#include "tessera/core/storage.h"

#include "tessera/core/allocator.h"

#include <algorithm>
#include <mutex>

namespace tessera {

namespace detail {
__attribute__((tls_model("initial-exec"))) constinit thread_local PlannedBuffers* t_planned = nullptr;
}
PlannedBuffersGuard::PlannedBuffersGuard(PlannedBuffers* p) : prev_(detail::t_planned) { detail::t_planned = p; }
PlannedBuffersGuard::~PlannedBuffersGuard() { detail::t_planned = prev_; }

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), owned_(true), device_(device) {
  if (!device.is_cpu()) [[unlikely]] {
    data_ = device_allocator(device.type).allocate(nbytes);
    return;
  }
  if (detail::t_planned) [[unlikely]] {
    if (void* p = detail::t_planned->take(nbytes)) {
      data_ = p;
      owned_ = false;  // the arena's memory: freed with the arena
      return;
    }
  }
  data_ = cpu_allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), owned_(false), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (owned_) {
    if (device_.is_cpu()) [[likely]] cpu_free(data_, nbytes_);
    else device_allocator(device_.type).deallocate(data_, nbytes_);
  }
  else if (deleter_) deleter_(data_);
}

namespace {
std::mutex g_derived_mu;  // derived data is rare (constant weights): one lock for all
}

std::shared_ptr<const void> Storage::derived(const std::string& key) const {
  std::lock_guard<std::mutex> lock(g_derived_mu);
  if (!derived_) return nullptr;
  for (const Derived& d : *derived_)
    if (d.key == key && d.version == version()) return d.value;
  return nullptr;
}

void Storage::set_derived(const std::string& key, std::shared_ptr<const void> value) {
  std::lock_guard<std::mutex> lock(g_derived_mu);
  if (!derived_) derived_ = std::make_unique<std::vector<Derived>>();
  std::erase_if(*derived_, [&](const Derived& d) { return d.key == key || d.version != version(); });
  derived_->push_back({key, version(), std::move(value)});
}

}  // namespace tessera
