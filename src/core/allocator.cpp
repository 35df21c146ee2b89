#include "tessera/core/allocator.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <unistd.h>

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
  int64_t max_allocation = 0;  // 0: not read yet (default_max_allocation())
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
  // Printed as integers, so the text does not depend on the C locale.
  auto tenths = static_cast<int64_t>(std::llround(static_cast<double>(bytes) / (1 << 20) * 10));
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " MiB";
}

// TESSERA_MAX_ALLOC: "1073741824", "512M", "4G" (binary units).
int64_t parse_byte_count(const char* text) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  int shift = 0;
  if (end && *end) {
    switch (*end == 0 ? 0 : (*end | 0x20)) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      case 't': shift = 40; break;
      default: shift = -1;
    }
    ++end;
  }
  TS_CHECK(end != text && errno == 0 && v > 0 && shift >= 0 && *end == 0 && v < (int64_t{1} << (62 - shift)),
           "TESSERA_MAX_ALLOC='", text, "' is not a positive byte count (examples: 1073741824, 512M, 4G)");
  return static_cast<int64_t>(v) << shift;
}

int64_t default_max_allocation() {
  if (const char* env = std::getenv("TESSERA_MAX_ALLOC")) return parse_byte_count(env);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return int64_t{1} << 40;
  return static_cast<int64_t>(pages) * page;
}

int64_t max_allocation_locked(Cache& c) {
  if (c.max_allocation == 0) c.max_allocation = default_max_allocation();
  return c.max_allocation;
}

[[noreturn]] void over_max_allocation(size_t nbytes, int64_t cap, const std::string& what) {
  throw OutOfMemoryError(detail::str(what.empty() ? "an allocation" : what, " needs ", nbytes, " bytes (", mib(static_cast<int64_t>(std::min<size_t>(nbytes, size_t{1} << 62))),
                                     "), more than the largest single allocation allowed, ", mib(cap),
                                     " (the machine's memory by default; TESSERA_MAX_ALLOC or set_max_allocation() "
                                     "changes it)"));
}

// Note [Memory limit]
// An allocation that would take live bytes over the limit fails with an error
// that says what was asked and where memory stands, instead of letting the OS
// kill the process. Checked under the cache lock, before taking a block.
void check_limit(const Cache& c, size_t size, const std::string& what = "") {
  if (c.limit == 0 || size <= static_cast<size_t>(std::max<int64_t>(0, c.limit - c.stats.current_bytes))) return;
  throw OutOfMemoryError(detail::str("out of memory: ", what.empty() ? "" : what + ": ", "tried to allocate ", mib(static_cast<int64_t>(std::min<size_t>(size, size_t{1} << 62))), " (", size, " bytes) with ",
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
  Cache& c = cache();
  size_t size = 0;
  {
    // The block is counted as live before it is found, so that two threads
    // cannot both pass the limit check.
    std::lock_guard<std::mutex> g(c.mu);
    int64_t cap = max_allocation_locked(c);
    if (nbytes > static_cast<size_t>(cap)) over_max_allocation(nbytes, cap, "");
    size = round_size(nbytes);  // cannot overflow: nbytes is at most the cap
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

void set_max_allocation(int64_t bytes) {
  TS_CHECK(bytes >= 0, "set_max_allocation: the cap must be >= 0 bytes (0 restores the default), got ", bytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  c.max_allocation = bytes;
}

int64_t max_allocation() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  return max_allocation_locked(c);
}

void check_allocation(size_t nbytes, const std::string& what) {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  int64_t cap = max_allocation_locked(c);
  if (nbytes > static_cast<size_t>(cap)) over_max_allocation(nbytes, cap, what);
  check_limit(c, allocation_size(nbytes), what);
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
