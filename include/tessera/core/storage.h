#pragma once
// Storage: the bytes behind one or more tensors (views share it). It also holds
// the version counter that in-place ops bump, shared by all views of the data.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/intrusive_ptr.h"
#include "tessera/core/object_pool.h"

namespace tessera {

class Storage : public RefCounted {
 public:
  // Owned bytes from the allocator of `device` (the CPU's caching allocator;
  // on meta, none: data() is null and only the size is counted).
  explicit Storage(size_t nbytes, Device device = Device::cpu());
  // Borrowed CPU bytes: `deleter` (may be empty) runs when the last tensor goes.
  Storage(void* data, size_t nbytes, std::function<void(void*)> deleter);
  ~Storage() override;

  void* data() const { return data_; }
  Device device() const { return device_; }
  size_t nbytes() const { return nbytes_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

  // Data derived from these bytes and kept as long as they are (a kernel's
  // packed copy of constant weights). `key` names the derivation and its
  // parameters exactly; an entry made at another version is never returned.
  std::shared_ptr<const void> derived(const std::string& key) const;
  void set_derived(const std::string& key, std::shared_ptr<const void> value);
  // The entry for `key` at this version, made by `make` and kept if missing.
  template <typename Make>
  std::shared_ptr<const void> derived(const std::string& key, Make&& make) {
    std::shared_ptr<const void> d = derived(key);
    if (!d) set_derived(key, d = make());
    return d;
  }
  TS_POOLED(Storage)

 private:
  struct Derived {
    std::string key;
    uint32_t version;
    std::shared_ptr<const void> value;
  };
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  bool owned_ = true;
  Device device_;
  std::function<void(void*)> deleter_;
  std::atomic<uint32_t> version_{0};
  std::unique_ptr<std::vector<Derived>> derived_;  // rare: allocated on first use
};

using StoragePtr = IntrusivePtr<Storage>;

}  // namespace tessera
