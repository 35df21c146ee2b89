#include "tessera/core/storage.h"

#include "tessera/core/allocator.h"

namespace tessera {

Storage::Storage(size_t nbytes) : data_(cpu_allocate(nbytes)), nbytes_(nbytes), owned_(true) {}

Storage::Storage(void* data, size_t nbytes, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), owned_(false), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (owned_) cpu_free(data_, nbytes_);
  else if (deleter_) deleter_(data_);
}

}  // namespace tessera
