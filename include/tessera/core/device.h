#pragma once
#include <cstdint>
#include <ostream>

namespace tessera {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int16_t index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) {
  if (d.type == DeviceType::CPU) return os << "cpu";
  return os << "cuda:" << d.index;
}

}  // namespace tessera
