#pragma once
// Note [oneDNN context]
// Every oneDNN primitive Tessera runs (GEMM, convolution, int8) lives on one
// engine, runs on its thread's stream, and is kept in a PrimitiveCache:
// creating a primitive costs far more than running a small one. A cache only
// grows and an entry never changes once made, so a reference stays valid
// after the lock is released and several threads may run one primitive at
// once; each run brings its own scratchpad (user mode) from the caching
// allocator, since oneDNN's own would be shared by those threads.
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <mutex>
#include <memory>
#include <unordered_map>

namespace tessera::cpu::dnnl_context {

dnnl::engine& engine();
// This thread's stream on the engine (in order: a run is finished when execute returns).
dnnl::stream& stream();

template <typename Key, typename Value>
class PrimitiveCache {
 public:
  // The entry for `key`, made by make() the first time.
  template <typename Make>
  const Value& get(const Key& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) it = map_.emplace(key, make()).first;
    return it->second;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }

 private:
  std::mutex mu_;
  std::map<Key, Value> map_;
};

// Memory from the caching allocator for a primitive's operands in its own
// layout, freed when the call that took it returns.
class Buffers {
 public:
  Buffers() = default;
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers();
  void* get(size_t bytes);

 private:
  std::vector<std::pair<void*, size_t>> held_;
};

// Note [int8 without VNNI]
// oneDNN's int8 kernels are exact only with VNNI (vpdpbusd: u8 x s8 summed in
// int32). Without it (AVX2, AVX-512 before VNNI) they sum pairs of u8 x s8
// products in saturating int16 (vpmaddubsw: 255 * 127 * 2 overflows) and
// halve the weights of s8 inputs. So on such CPUs Tessera runs int8 products
// as f32 products of the codes (exact while every sum stays below 2^24).
// This is oneDNN's view of the CPU: DNNL_MAX_CPU_ISA can lower it.
bool int8_products_exact();

// Runs `prim` with `args` on this thread's stream, with a scratchpad of
// `scratch`'s size from the caching allocator, and waits for it.
void execute(const dnnl::primitive& prim, const dnnl::memory::desc& scratch, std::unordered_map<int, dnnl::memory>& args);

// `data` laid out as `from`, copied into a new buffer laid out as `to` (a
// primitive's own weight layout): the packed copy constant weights keep.
std::shared_ptr<const void> reordered_copy(const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                                           const void* data);

}  // namespace tessera::cpu::dnnl_context
