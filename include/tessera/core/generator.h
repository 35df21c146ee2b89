#pragma once
// Counter-based random numbers (Philox4x32-10). A (seed, offset) pair fully
// determines every random tensor: element i of a draw depends only on the seed,
// the draw's starting offset and i, never on the number of threads.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>

namespace tessera {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  uint64_t offset() const;
  void set_state(uint64_t seed, uint64_t offset);
  // Reserves `blocks` Philox counters and returns the first; thread-safe.
  uint64_t reserve(uint64_t blocks);

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace tessera
