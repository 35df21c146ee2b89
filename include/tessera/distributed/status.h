#pragma once
// Status records: what each rank last did, in a small file per rank that the
// other ranks' watchdogs and the launcher read when a job fails (Note [Status
// records] in src/distributed/status.cpp); `tessera launch` reads them too.
#include <cstdint>
#include <optional>
#include <string>

#include "tessera/distributed/process_group.h"

namespace tessera::distributed {

struct StatusRecord {
  static constexpr uint32_t kMagic = 0x54534452;  // "TSDR"
  uint32_t magic = kMagic;
  uint32_t writes = 0;  // odd while being written
  int32_t rank = -1;
  int32_t pid = 0;
  char host[64] = {};
  int64_t step = -1;
  uint64_t seq = 0;          // the collective's sequence number in its group
  char op[24] = {};
  char group[40] = {};
  uint8_t dtype = 0;
  uint8_t in_collective = 0;  // 1 from issue to completion
  uint8_t finished = 0;       // the rank shut down cleanly
  int64_t count = 0;
  double started = 0;         // unix seconds the current/last collective started
  double updated = 0;

  std::string describe() const;  // "step 10, in allreduce f32[1024] #41 on world for 3.2 s"
};

class StatusBoard {
 public:
  static StatusBoard& get();
  // Starts writing this rank's record into `dir` (created if missing).
  void open(const std::string& dir, int rank);
  const std::string& dir() const { return dir_; }
  void set_step(int64_t step);
  int64_t step() const;
  void begin(const std::string& group, const CollectiveInfo& info);
  void end();
  void finish();
  // Another rank's record, when its file can be read (same host or a shared directory).
  std::optional<StatusRecord> read(int rank) const;
  static std::optional<StatusRecord> read_file(const std::string& path);
  static std::string path_of(const std::string& dir, int rank);

 private:
  template <typename F> void write(F&& f);
  std::string dir_;
  StatusRecord* rec_ = nullptr;  // mmapped
  StatusRecord local_;           // when no directory is set
};

}  // namespace tessera::distributed
