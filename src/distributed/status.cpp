// Note [Status records]
// A hung collective cannot say who is missing: MPI gives no way to ask which
// peers have arrived. So each rank keeps a record of what it is doing (its
// training step, the collective it is in, since when) in a small file that it
// maps into memory and updates with plain stores. When a deadline passes, the
// watchdog reads its peers' records and names those that are behind or gone;
// the launcher reads them all to print who died or hung, where. A record is
// written under a counter that is odd while a write is in progress (a
// seqlock), so a reader in another process retries rather than reading half.
// Ranks on other hosts are readable only if the directory is shared.
#include "tessera/distributed/status.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

namespace tessera::distributed {

namespace {
std::mutex g_write_mu;

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

template <size_t N> void copy_str(char (&dst)[N], const std::string& s) {
  std::memset(dst, 0, N);
  std::memcpy(dst, s.data(), std::min(s.size(), N - 1));
}
}  // namespace

std::string StatusRecord::describe() const {
  std::string s = "step " + std::to_string(step);
  if (finished) return s + ", finished";
  if (seq == 0 && !in_collective) return s + ", no collective yet";
  CollectiveInfo i;
  i.seq = seq;
  i.op = op;
  i.dtype = static_cast<DType>(dtype);
  i.count = count;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", now_seconds() - started);
  return s + (in_collective ? ", in " : ", last in ") + i.describe() + " on " + group +
         (in_collective ? std::string(" for ") + buf + " s" : "");
}

StatusBoard& StatusBoard::get() {
  static StatusBoard board;
  return board;
}

std::string StatusBoard::path_of(const std::string& dir, int rank) {
  return dir + "/rank-" + std::to_string(rank) + ".status";
}

void StatusBoard::open(const std::string& dir, int rank) {
  std::lock_guard<std::mutex> lock(g_write_mu);
  local_.rank = rank;
  local_.pid = static_cast<int32_t>(getpid());
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  std::memcpy(local_.host, host, sizeof host);
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = path_of(dir, rank);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ftruncate(fd, sizeof(StatusRecord)) != 0) {
    if (fd >= 0) ::close(fd);
    std::fprintf(stderr, "tessera: rank %d cannot write its status record %s: %s (continuing without it)\n", rank,
                 path.c_str(), std::strerror(errno));
    return;
  }
  void* p = mmap(nullptr, sizeof(StatusRecord), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return;
  rec_ = static_cast<StatusRecord*>(p);
  std::memcpy(static_cast<void*>(rec_), &local_, sizeof local_);
  dir_ = dir;
}

template <typename F> void StatusBoard::write(F&& f) {
  std::lock_guard<std::mutex> lock(g_write_mu);
  f(local_);
  local_.updated = now_seconds();
  if (!rec_) return;
  std::atomic_ref<uint32_t> writes(rec_->writes);
  const uint32_t w = local_.writes + 1;
  writes.store(w, std::memory_order_release);  // odd: writing
  std::atomic_thread_fence(std::memory_order_release);
  local_.writes = w;
  std::memcpy(reinterpret_cast<char*>(rec_) + sizeof(uint32_t) * 2, reinterpret_cast<char*>(&local_) + sizeof(uint32_t) * 2,
              sizeof(StatusRecord) - sizeof(uint32_t) * 2);
  local_.writes = w + 1;
  writes.store(w + 1, std::memory_order_release);
}

void StatusBoard::set_step(int64_t step) {
  write([&](StatusRecord& r) { r.step = step; });
}

int64_t StatusBoard::step() const {
  std::lock_guard<std::mutex> lock(g_write_mu);
  return local_.step;
}

void StatusBoard::begin(const std::string& group, const CollectiveInfo& info) {
  write([&](StatusRecord& r) {
    r.seq = info.seq;
    copy_str(r.op, info.op);
    copy_str(r.group, group);
    r.dtype = static_cast<uint8_t>(info.dtype);
    r.count = info.count;
    r.in_collective = 1;
    r.started = now_seconds();
  });
}

void StatusBoard::end() {
  write([](StatusRecord& r) { r.in_collective = 0; });
}

void StatusBoard::finish() {
  write([](StatusRecord& r) { r.finished = 1; });
}

std::optional<StatusRecord> StatusBoard::read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  StatusRecord r;
  bool ok = false;
  for (int attempt = 0; attempt < 100 && !ok; ++attempt) {
    StatusRecord a, b;
    ok = pread(fd, &a, sizeof a, 0) == sizeof a && pread(fd, &b, sizeof b, 0) == sizeof b && a.magic == StatusRecord::kMagic &&
         a.writes % 2 == 0 && a.writes == b.writes;
    if (ok) r = b;
  }
  ::close(fd);
  if (!ok) return std::nullopt;
  r.host[sizeof r.host - 1] = 0;
  r.op[sizeof r.op - 1] = 0;
  r.group[sizeof r.group - 1] = 0;
  return r;
}

std::optional<StatusRecord> StatusBoard::read(int rank) const {
  if (dir_.empty()) return std::nullopt;
  return read_file(path_of(dir_, rank));
}

}  // namespace tessera::distributed
