#include "tessera/core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "tessera/core/error.h"

namespace tessera {
namespace {

// Size classes: multiples of 64 bytes up to 4 KiB, then four classes per power
// of two, so a reused block wastes at most 25%.
size_t round_size(size_t n) {
  if (n == 0) n = 1;
  if (n <= 4096) return (n + 63) & ~size_t(63);
  size_t p = size_t(1) << (63 - __builtin_clzll(n));
  size_t step = p / 4;
  return (n + step - 1) / step * step;
}

constexpr size_t kSmallClasses = 4096 / 64;  // sizes up to 4 KiB: one bin per 64 bytes

struct Cache {
  std::mutex mu;
  std::vector<void*> small[kSmallClasses];  // indexed by size / 64 - 1
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  MemoryStats stats;
  std::vector<void*>& bin(size_t size) { return size <= 4096 ? small[size / 64 - 1] : free_blocks[size]; }
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may outlive static destructors
  return *c;
}

}  // namespace

void* cpu_allocate(size_t nbytes) {
  size_t size = round_size(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> g(c.mu);
    c.stats.allocations++;
    std::vector<void*>& bin = c.bin(size);
    if (!bin.empty()) {
      void* p = bin.back();
      bin.pop_back();
      c.stats.cache_hits++;
      c.stats.current_bytes += size;
      if (c.stats.current_bytes > c.stats.peak_bytes) c.stats.peak_bytes = c.stats.current_bytes;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, size);
  if (!p) {
    empty_cache();
    p = std::aligned_alloc(kAlignment, size);
  }
  TS_CHECK(p, "out of memory: could not allocate ", nbytes, " bytes on the CPU");
  std::lock_guard<std::mutex> g(c.mu);
  c.stats.os_allocations++;
  c.stats.reserved_bytes += size;
  c.stats.current_bytes += size;
  if (c.stats.current_bytes > c.stats.peak_bytes) c.stats.peak_bytes = c.stats.current_bytes;
  return p;
}

void cpu_free(void* p, size_t nbytes) {
  if (!p) return;
  size_t size = round_size(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  c.stats.current_bytes -= size;
  c.bin(size).push_back(p);
}

MemoryStats memory_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  return c.stats;
}

void reset_peak_memory() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  c.stats.peak_bytes = c.stats.current_bytes;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  auto drop = [&](size_t size, std::vector<void*>& blocks) {
    for (void* p : blocks) std::free(p);
    c.stats.reserved_bytes -= static_cast<int64_t>(size * blocks.size());
    blocks.clear();
  };
  for (size_t i = 0; i < kSmallClasses; ++i) drop((i + 1) * 64, c.small[i]);
  for (auto& [size, blocks] : c.free_blocks) drop(size, blocks);
  c.free_blocks.clear();
}

}  // namespace tessera
