#pragma once
// WebDataset-style tar shards, for datasets larger than memory. A shard is a
// plain (ustar) tar file; a sample is the group of consecutive files that share
// a key, e.g. "000042.x.npy" and "000042.y.cls" form sample "000042" with fields
// "x.npy" and "y.cls". Fields are decoded by extension: .npy -> the tensor,
// .cls -> an I64 scalar (decimal text). Shards are read one at a time, so only
// one shard per worker is in memory.
#include <string>
#include <vector>

#include "tessera/data/dataset.h"
#include "tessera/io/file.h"

namespace tessera::data {

// One file of a tar archive.
struct TarEntry {
  std::string name;
  std::string data;
};
// Parses a tar image; checks every header's checksum, size and bounds.
std::vector<TarEntry> parse_tar(const char* data, size_t size, const std::string& what = "tar data");

class ShardWriter {
 public:
  // pattern: a printf pattern with one integer, e.g. "out/train-%06d.tar".
  ShardWriter(std::string pattern, int64_t samples_per_shard);
  ~ShardWriter();
  // Fields: (extension, tensor); ".cls" fields must be integer scalars.
  void write(const std::string& key, const std::vector<std::pair<std::string, Tensor>>& fields);
  void close();  // finishes the current shard (also done by the destructor)
  const std::vector<std::string>& shards() const { return shards_; }

 private:
  void flush();
  std::string pattern_;
  int64_t per_shard_, in_shard_ = 0;
  std::string buffer_;
  std::vector<std::string> shards_;
};

// Streams samples from shards. Each epoch the shard order is shuffled (when
// shuffle_buffer > 0) from (seed, epoch); shard i goes to the worker
// (rank * num_workers + worker) == i % (world_size * num_workers); samples pass
// through a shuffle buffer of the given size. The sample order depends on the
// number of workers (as with any sharded stream); the set of samples does not.
class ShardedDataset : public IterableDataset {
 public:
  ShardedDataset(std::vector<std::string> shards, std::vector<std::string> fields, int64_t shuffle_buffer = 0,
                 int rank = 0, int world_size = 1);
  std::unique_ptr<Stream> open(int worker, int num_workers, int64_t epoch, uint64_t seed) const override;
  const std::vector<std::string>& shard_paths() const { return shards_; }

 private:
  std::vector<std::string> shards_, fields_;
  int64_t buffer_;
  int rank_, world_;
};

// Shard paths: a directory (every *.tar in it, sorted) or a brace range
// "train-{000000..000009}.tar".
std::vector<std::string> expand_shards(const std::string& spec);

}  // namespace tessera::data
