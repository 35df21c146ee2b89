#pragma once
// The CPU caching allocator. Page faults cost ~15 us per 4 KiB page on the VMs
// we run on, so freed blocks are kept by size class and reused instead of being
// returned to the OS; empty_cache() hands them back on request.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/core/device.h"

namespace tessera {

struct MemoryStats {
  int64_t current_bytes = 0;    // bytes in live tensors (rounded block sizes)
  int64_t peak_bytes = 0;       // max of current_bytes since start or reset_peak()
  int64_t reserved_bytes = 0;   // bytes obtained from the OS: live + cached
  int64_t allocations = 0;      // number of allocate() calls
  int64_t cache_hits = 0;       // allocate() calls served from the cache
  int64_t os_allocations = 0;   // allocate() calls that went to the OS
};

constexpr size_t kAlignment = 64;

void* cpu_allocate(size_t nbytes);
void cpu_free(void* p, size_t nbytes);

// The block size the allocator uses (and accounts) for a request of nbytes.
size_t allocation_size(size_t nbytes);

MemoryStats memory_stats();
// Bytes in live tensors now, and the most since start or reset_peak_memory().
int64_t memory_allocated();
int64_t max_memory_allocated();
void reset_peak_memory();
// Returns every cached block to the OS.
void empty_cache();
// Live bytes may not exceed `bytes` (0: no limit): an allocation that would
// throws OutOfMemoryError naming the request, the use, the peak and the limit.
// A limit below the current use is refused.
void set_memory_limit(int64_t bytes);
int64_t memory_limit();

// The largest single allocation (Note [Sizes from outside] in shape.h): a
// request over it throws OutOfMemoryError before anything is allocated, so a
// file that declares a huge tensor is an error, not a process the OS kills.
// Default: the machine's physical memory, or TESSERA_MAX_ALLOC (bytes, or
// with a K/M/G/T suffix, e.g. "512M"). 0 restores the default.
void set_max_allocation(int64_t bytes);
int64_t max_allocation();
// Throws OutOfMemoryError if `nbytes` is over max_allocation() or would take
// live bytes over memory_limit(); `what` describes the request in the message
// (e.g. "a tensor of shape [4096, 4096] f32").
void check_allocation(size_t nbytes, const std::string& what);

// The allocator of one device type. The CPU's is the caching allocator above;
// meta's counts the bytes its tensors would take and hands out none, so a
// model built or run on meta reports its memory (current, peak) without
// having any. A backend of another device installs its own when it
// registers (backend/backend.h).
struct DeviceAllocator {
  void* (*allocate)(size_t nbytes);  // null on meta
  void (*deallocate)(void* p, size_t nbytes);
  MemoryStats (*stats)();
  void (*reset_peak)();
};
// The allocator of `t`; an error naming the device when no backend of it is
// in this build.
const DeviceAllocator& device_allocator(DeviceType t);
void set_device_allocator(DeviceType t, const DeviceAllocator* a);
extern const DeviceAllocator kCpuDeviceAllocator, kMetaDeviceAllocator;
MemoryStats memory_stats(Device d);
void reset_peak_memory(Device d);

// Planned memory: the graph executor places node outputs in one arena by a
// static plan (compile/executor.h). While a PlannedBuffers is installed on a
// thread, a new tensor of a planned size takes its planned place instead of a
// block from the allocator (and gives nothing back when it dies).
class PlannedBuffers {
 public:
  virtual ~PlannedBuffers() = default;
  // Memory for a new tensor of `nbytes`, or null for the allocator to serve.
  virtual void* take(size_t nbytes) = 0;
};
class PlannedBuffersGuard {
 public:
  explicit PlannedBuffersGuard(PlannedBuffers* p);
  ~PlannedBuffersGuard();
  PlannedBuffersGuard(const PlannedBuffersGuard&) = delete;
  PlannedBuffersGuard& operator=(const PlannedBuffersGuard&) = delete;

 private:
  PlannedBuffers* prev_;
};
namespace detail {
extern __attribute__((tls_model("initial-exec"))) constinit thread_local PlannedBuffers* t_planned;
}

}  // namespace tessera
