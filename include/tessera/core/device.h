#pragma once
// Where a tensor's data lives. Each device type has one backend (backend/
// registry.cpp): its allocator, its kernels, its copies and its generator.
// `meta` is a device without memory: tensors there have shapes, dtypes and
// strides, every op's shape rule runs on them and no kernel does (Note [The
// meta device] in backend/meta/backend.cpp).
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace tessera {

enum class DeviceType : uint8_t { CPU, Meta, CUDA, kCount };
constexpr int kNumDeviceTypes = static_cast<int>(DeviceType::kCount);

struct Device {
  DeviceType type = DeviceType::CPU;
  int16_t index = 0;
  constexpr Device() = default;
  constexpr Device(DeviceType t, int16_t i = 0) : type(t), index(i) {}
  static constexpr Device cpu() { return Device(DeviceType::CPU); }
  static constexpr Device meta() { return Device(DeviceType::Meta); }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_meta() const { return type == DeviceType::Meta; }
  friend bool operator==(const Device&, const Device&) = default;
};

const char* device_type_name(DeviceType t);  // "cpu", "meta", "cuda"
std::string device_str(const Device& d);     // "cpu", "meta", "cuda:1"
// "cpu", "meta", "cuda" or "cuda:N"; anything else is an error naming the choices.
Device parse_device(std::string_view s);

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << device_str(d); }

}  // namespace tessera
