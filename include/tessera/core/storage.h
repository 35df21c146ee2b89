#pragma once
// Storage: the bytes behind one or more tensors (views share it). It also holds
// the version counter that in-place ops bump, shared by all views of the data.
#include <cstddef>
#include <cstdint>
#include <functional>

#include "tessera/core/intrusive_ptr.h"
#include "tessera/core/object_pool.h"

namespace tessera {

class Storage : public RefCounted {
 public:
  // Owned bytes from the caching allocator.
  explicit Storage(size_t nbytes);
  // Borrowed bytes: `deleter` (may be empty) runs when the last tensor goes.
  Storage(void* data, size_t nbytes, std::function<void(void*)> deleter);
  ~Storage() override;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }
  TS_POOLED(Storage)

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  bool owned_ = true;
  std::function<void(void*)> deleter_;
  std::atomic<uint32_t> version_{0};
};

using StoragePtr = IntrusivePtr<Storage>;

}  // namespace tessera
