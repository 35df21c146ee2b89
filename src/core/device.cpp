#include "tessera/core/device.h"

#include <atomic>
#include <charconv>

#include "tessera/core/allocator.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera {

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::Meta: return "meta";
    case DeviceType::CUDA: return "cuda";
    case DeviceType::kCount: break;
  }
  return "?";
}

std::string device_str(const Device& d) {
  std::string s = device_type_name(d.type);
  if (d.type == DeviceType::CUDA) s += ":" + std::to_string(d.index);
  return s;
}

Device parse_device(std::string_view s) {
  if (s == "cpu") return Device::cpu();
  if (s == "meta") return Device::meta();
  if (s == "cuda") return Device(DeviceType::CUDA, 0);
  if (s.starts_with("cuda:")) {
    int index = -1;
    std::string_view n = s.substr(5);
    auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    if (ec == std::errc() && end == n.data() + n.size() && index >= 0 && index < 32768)
      return Device(DeviceType::CUDA, static_cast<int16_t>(index));
  }
  TS_ERROR("unknown device '", std::string(s), "': expected 'cpu', 'meta', 'cuda' or 'cuda:N'");
}

// ---- the current device ------------------------------------------------------

namespace detail {
__attribute__((tls_model("initial-exec"))) constinit thread_local Device t_current_device = Device::cpu();
}

DeviceScope::DeviceScope(Device d) : prev_(detail::t_current_device) { detail::t_current_device = d; }
DeviceScope::~DeviceScope() { detail::t_current_device = prev_; }

// ---- device allocators -----------------------------------------------------------

namespace {

// Note [Meta memory]
// Meta tensors own no bytes, but their storage counts the block the CPU's
// allocator would give them (allocation_size), so a meta run's current and
// peak bytes are what the same run would take on the CPU: `tessera info
// --meta` and ZeRO-3's planning read them.
struct MetaCounter {
  std::atomic<int64_t> current{0}, peak{0}, allocations{0};
};
MetaCounter& meta_counter() {
  static MetaCounter c;
  return c;
}
void* meta_allocate(size_t nbytes) {
  MetaCounter& c = meta_counter();
  int64_t size = static_cast<int64_t>(allocation_size(nbytes));
  int64_t now = c.current.fetch_add(size, std::memory_order_relaxed) + size;
  int64_t p = c.peak.load(std::memory_order_relaxed);
  while (now > p && !c.peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
  c.allocations.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}
void meta_deallocate(void*, size_t nbytes) {
  meta_counter().current.fetch_sub(static_cast<int64_t>(allocation_size(nbytes)), std::memory_order_relaxed);
}
MemoryStats meta_stats() {
  MetaCounter& c = meta_counter();
  MemoryStats s;
  s.current_bytes = c.current.load();
  s.peak_bytes = c.peak.load();
  s.allocations = c.allocations.load();
  return s;
}
void meta_reset_peak() { meta_counter().peak.store(meta_counter().current.load()); }

void* cpu_allocate_fn(size_t nbytes) { return cpu_allocate(nbytes); }
MemoryStats cpu_stats() { return memory_stats(); }
void cpu_reset_peak() { reset_peak_memory(); }

}  // namespace

constinit const DeviceAllocator kCpuDeviceAllocator{cpu_allocate_fn, cpu_free, cpu_stats, cpu_reset_peak};
constinit const DeviceAllocator kMetaDeviceAllocator{meta_allocate, meta_deallocate, meta_stats, meta_reset_peak};
namespace {
constinit const DeviceAllocator* g_allocators[kNumDeviceTypes] = {&kCpuDeviceAllocator, &kMetaDeviceAllocator,
                                                                  nullptr};
}  // namespace

const DeviceAllocator& device_allocator(DeviceType t) {
  const DeviceAllocator* a = g_allocators[static_cast<int>(t)];
  TS_CHECK(a, "device ", device_type_name(t), " is not available in this build (devices: cpu, meta)");
  return *a;
}

void set_device_allocator(DeviceType t, const DeviceAllocator* a) { g_allocators[static_cast<int>(t)] = a; }

MemoryStats memory_stats(Device d) { return device_allocator(d.type).stats(); }
void reset_peak_memory(Device d) { device_allocator(d.type).reset_peak(); }

}  // namespace tessera
