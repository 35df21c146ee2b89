#include "tessera/core/generator.h"

namespace tessera {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kM0) * c[0];
    uint64_t p1 = uint64_t(kM1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

void Generator::manual_seed(uint64_t seed) { set_state(seed, 0); }
uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> g(mu_);
  return seed_;
}
uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> g(mu_);
  return offset_;
}
void Generator::set_state(uint64_t seed, uint64_t offset) {
  std::lock_guard<std::mutex> g(mu_);
  seed_ = seed;
  offset_ = offset;
}
uint64_t Generator::reserve(uint64_t blocks) {
  std::lock_guard<std::mutex> g(mu_);
  uint64_t o = offset_;
  offset_ += blocks;
  return o;
}

Generator& default_generator() {
  static Generator g;
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace tessera
