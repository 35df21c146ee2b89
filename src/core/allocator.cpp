#include "tessera/core/allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/trace.h"

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
  int64_t limit = 0;  // 0: none
  std::vector<void*>& bin(size_t size) { return size <= 4096 ? small[size / 64 - 1] : free_blocks[size]; }
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may outlive static destructors
  return *c;
}

}  // namespace

namespace {
void* allocate_block(size_t nbytes);

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// Note [Memory limit]
// An allocation that would take live bytes over the limit fails with an error
// that says what was asked and where memory stands, instead of letting the OS
// kill the process. Checked under the cache lock, before taking a block.
void check_limit(const Cache& c, size_t size) {
  if (c.limit == 0 || c.stats.current_bytes + static_cast<int64_t>(size) <= c.limit) return;
  throw OutOfMemoryError(detail::str("out of memory: tried to allocate ", mib(static_cast<int64_t>(size)), " (", size, " bytes) with ",
           mib(c.stats.current_bytes), " in use, a peak of ", mib(c.stats.peak_bytes), " and a memory limit of ",
           mib(c.limit), "; lower the batch size, use gradient checkpointing or mixed precision, or raise the "
           "limit (set_memory_limit)"));
}
}  // namespace

void* cpu_allocate(size_t nbytes) {
  void* p = allocate_block(nbytes);
  trace::allocated(p, static_cast<int64_t>(round_size(nbytes)));
  return p;
}

namespace {
void* allocate_block(size_t nbytes) {
  size_t size = round_size(nbytes);
  Cache& c = cache();
  {
    // The block is counted as live before it is found, so that two threads
    // cannot both pass the limit check.
    std::lock_guard<std::mutex> g(c.mu);
    check_limit(c, size);
    c.stats.allocations++;
    c.stats.current_bytes += size;
    c.stats.peak_bytes = std::max(c.stats.peak_bytes, c.stats.current_bytes);
    std::vector<void*>& bin = c.bin(size);
    if (!bin.empty()) {
      void* p = bin.back();
      bin.pop_back();
      c.stats.cache_hits++;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, size);
  if (!p) {
    empty_cache();
    p = std::aligned_alloc(kAlignment, size);
  }
  std::lock_guard<std::mutex> g(c.mu);
  if (!p) {
    c.stats.current_bytes -= size;
    throw OutOfMemoryError(detail::str("out of memory: the system could not provide ", nbytes, " bytes (",
                                       mib(static_cast<int64_t>(nbytes)), ") on the CPU, with ",
                                       mib(c.stats.current_bytes), " in use by tensors"));
  }
  c.stats.os_allocations++;
  c.stats.reserved_bytes += size;
  return p;
}
}  // namespace

void cpu_free(void* p, size_t nbytes) {
  if (!p) return;
  size_t size = round_size(nbytes);
  trace::freed(p, static_cast<int64_t>(size));
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

size_t allocation_size(size_t nbytes) { return round_size(nbytes); }

int64_t memory_allocated() { return memory_stats().current_bytes; }
int64_t max_memory_allocated() { return memory_stats().peak_bytes; }

void set_memory_limit(int64_t bytes) {
  TS_CHECK(bytes >= 0, "set_memory_limit: the limit must be >= 0 bytes (0 removes it), got ", bytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  TS_CHECK(bytes == 0 || bytes >= c.stats.current_bytes, "set_memory_limit: the limit ", mib(bytes), " (", bytes,
           " bytes) is below the memory already in use, ", mib(c.stats.current_bytes),
           "; free tensors first or choose a limit of at least that");
  c.limit = bytes;
}

int64_t memory_limit() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  return c.limit;
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
