#pragma once
// File helpers shared by every writer and reader: whole-file reads with a size
// limit, memory maps, and atomic writes (temporary name, fsync, rename), so a
// crash or a full disk never leaves a half-written file under the real name.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessera::io {

// Writes through a file descriptor and throws (naming the path and the errno
// text, e.g. "No space left on device") on the first failed write.
class Writer {
 public:
  Writer(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void write(const void* data, size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  uint64_t bytes_written() const { return written_; }

 private:
  int fd_;
  std::string path_;
  uint64_t written_ = 0;
};

// Runs `fill` on a temporary file next to `path`, fsyncs it and renames it over
// `path`, then fsyncs the directory. On any error the temporary file is removed,
// `path` is untouched, and the error is rethrown.
void write_file_atomic(const std::string& path, const std::function<void(Writer&)>& fill);

std::vector<char> read_file(const std::string& path, size_t max_bytes = size_t(1) << 34);

// A read-only view of a whole file (private, copy-on-write mapping).
struct MappedFile {
  const char* data = nullptr;
  size_t size = 0;
  std::string path;
  ~MappedFile();
};
std::shared_ptr<MappedFile> map_file(const std::string& path);

void fsync_dir(const std::string& dir);
bool path_exists(const std::string& path);

}  // namespace tessera::io
