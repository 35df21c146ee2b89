#include "backend/cpu/dnnl_context.h"

#include <algorithm>

#include "tessera/core/allocator.h"

namespace tessera::cpu::dnnl_context {

dnnl::engine& engine() {
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never destroyed: used until exit
  return *e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

bool int8_products_exact() {
  static const bool vnni = [] {
    using I = dnnl::cpu_isa;
    const I isa = dnnl::get_effective_cpu_isa();
    return isa == I::avx512_core_vnni || isa == I::avx512_core_bf16 || isa == I::avx512_core_amx ||
           isa == I::avx2_vnni;
  }();
  return vnni;
}

Buffers::~Buffers() {
  for (auto& [p, n] : held_) cpu_free(p, n);
}

void* Buffers::get(size_t bytes) {
  const size_t n = std::max<size_t>(bytes, 64);
  void* p = cpu_allocate(n);
  held_.emplace_back(p, n);
  return p;
}

void execute(const dnnl::primitive& prim, const dnnl::memory::desc& scratch,
             std::unordered_map<int, dnnl::memory>& args) {
  Buffers buffers;
  if (const size_t n = scratch.get_size()) args.insert({DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch, engine(), buffers.get(n))});
  dnnl::stream& s = stream();
  prim.execute(s, args);
  s.wait();
}

std::shared_ptr<const void> reordered_copy(const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                                           const void* data) {
  const size_t n = std::max<size_t>(to.get_size(), 64);
  std::shared_ptr<void> copy(cpu_allocate(n), [n](void* p) { cpu_free(p, n); });
  dnnl::memory src(from, engine(), const_cast<void*>(data)), dst(to, engine(), copy.get());
  dnnl::stream& s = stream();
  dnnl::reorder(src, dst).execute(s, src, dst);
  s.wait();
  return copy;
}

}  // namespace tessera::cpu::dnnl_context
