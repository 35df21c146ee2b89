#include "tessera/io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tessera/core/error.h"

namespace tessera::io {

static std::string errno_text() { return std::strerror(errno); }

void Writer::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    TS_CHECK(w > 0, "writing ", path_, " failed after ", written_, " bytes: ", w < 0 ? errno_text() : "no progress");
    p += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void write_file_atomic(const std::string& path, const std::function<void(Writer&)>& fill) {
  namespace fs = std::filesystem;
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TS_CHECK(fd >= 0, "cannot create ", tmp, ": ", errno_text());
  try {
    Writer w(fd, path);
    fill(w);
    TS_CHECK(::fsync(fd) == 0, "writing ", path, " failed at fsync: ", errno_text());
    TS_CHECK(::close(fd) == 0, "writing ", path, " failed at close: ", errno_text());
    fd = -1;
    TS_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path, ": ", errno_text());
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_dir(fs::path(path).parent_path().string());
}

std::vector<char> read_file(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK(fd >= 0, "cannot open ", path, ": ", errno_text());
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    TS_ERROR(path, " is not a regular file");
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    TS_ERROR(path, " is ", size, " bytes, more than the limit of ", max_bytes);
  }
  std::vector<char> buf(size);
  size_t got = 0;
  while (got < size) {
    ssize_t r = ::read(fd, buf.data() + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      TS_ERROR("reading ", path, " failed after ", got, " of ", size, " bytes", r < 0 ? ": " + errno_text() : "");
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  return buf;
}

MappedFile::~MappedFile() {
  if (data && size) ::munmap(const_cast<char*>(data), size);
}

std::shared_ptr<MappedFile> map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK(fd >= 0, "cannot open ", path, ": ", errno_text());
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    TS_ERROR(path, " is not a regular file");
  }
  auto m = std::make_shared<MappedFile>();
  m->path = path;
  m->size = static_cast<size_t>(st.st_size);
  if (m->size > 0) {
    void* p = ::mmap(nullptr, m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      TS_ERROR("cannot map ", path, ": ", errno_text());
    }
    m->data = static_cast<const char*>(p);
  }
  ::close(fd);
  return m;
}

}  // namespace tessera::io
