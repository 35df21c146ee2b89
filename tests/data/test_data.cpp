// DataLoader determinism across worker counts, mid-epoch resume, datasets,
// transforms and tar shards.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include <filesystem>
#include <fstream>

#include "tessera/data/dataloader.h"
#include "tessera/data/datasets.h"
#include "tessera/data/shards.h"
#include "tessera/io/file.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::data;
using tessera::testing::error_of;
namespace fs = std::filesystem;

namespace {
// Sample i = {augmented image, label i}: exercises the per-sample generator.
std::shared_ptr<Dataset> augmented_dataset(int64_t n) {
  auto base = std::make_shared<TensorDataset>(TensorList{ops::randn({n, 1, 6, 6}), arange(n, DType::I64)});
  Transform t = compose({random_crop(6, 2), random_horizontal_flip(), random_erasing(0.5)});
  return std::make_shared<MapDataset>(base, [t](Example e) { return Example{t(e[0]), e[1]}; });
}

std::vector<TensorList> epoch_of(DataLoader& dl) {
  std::vector<TensorList> out;
  while (auto b = dl.next()) out.push_back(*b);
  return out;
}

bool same(const std::vector<TensorList>& a, const std::vector<TensorList>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t f = 0; f < a[i].size(); ++f)
      if (!ops::all(ops::eq(a[i][f], b[i][f])).item<bool>()) return false;
  return true;
}
}  // namespace

TEST(DataLoader, SameBatchesForAnyNumberOfWorkers) {
  auto ds = augmented_dataset(103);
  std::vector<std::vector<TensorList>> runs;
  for (int workers : {0, 1, 2, 4}) {
    DataLoader dl(ds, {.batch_size = 8, .shuffle = true, .seed = 7, .num_workers = workers});
    EXPECT_EQ(dl.batches_per_epoch(), 13);
    auto e0 = epoch_of(dl), e1 = epoch_of(dl);
    EXPECT_FALSE(same(e0, e1));  // a new permutation and new augmentation per epoch
    runs.push_back(e0);
    runs.back().insert(runs.back().end(), e1.begin(), e1.end());
  }
  for (size_t i = 1; i < runs.size(); ++i) EXPECT_TRUE(same(runs[0], runs[i])) << "worker count run " << i;
  // every sample once per epoch
  std::vector<int64_t> seen;
  for (size_t b = 0; b < 13; ++b)
    for (auto v : runs[0][b][1].to_vector<int64_t>()) seen.push_back(v);
  std::sort(seen.begin(), seen.end());
  for (int64_t i = 0; i < 103; ++i) EXPECT_EQ(seen[i], i);
}

TEST(DataLoader, RanksTakeTheirRowsOfEachGlobalBatch) {
  // 22 samples, global batch 8: every rank's batch b is its quarter of the one-process batch b.
  auto ds = std::make_shared<TensorDataset>(TensorList{arange(22, DType::I64)});
  DataLoader alone(ds, {.batch_size = 8, .shuffle = true, .seed = 3});
  auto whole = epoch_of(alone);
  ASSERT_EQ(whole.size(), 3u);
  std::vector<std::vector<TensorList>> ranks;
  for (int r = 0; r < 4; ++r) {
    DataLoader dl(ds, {.batch_size = 8, .shuffle = true, .seed = 3, .shard_rank = r, .shard_count = 4});
    EXPECT_EQ(dl.batches_per_epoch(), 3);  // the position does not depend on the ranks
    ranks.push_back(epoch_of(dl));
  }
  for (size_t b = 0; b < 2; ++b)
    for (int r = 0; r < 4; ++r)
      EXPECT_EQ(ranks[r][b][0].to_vector<int64_t>(), whole[b][0].narrow(0, 2 * r, 2).to_vector<int64_t>());
  // The short last batch (6 rows) is filled up with the epoch's first rows, as DistributedSampler does.
  std::vector<int64_t> last;
  for (int r = 0; r < 4; ++r)
    for (int64_t v : ranks[r][2][0].to_vector<int64_t>()) last.push_back(v);
  auto expect = whole[2][0].to_vector<int64_t>();
  auto first = whole[0][0].to_vector<int64_t>();
  expect.insert(expect.end(), first.begin(), first.begin() + 2);
  EXPECT_EQ(last, expect);
  // Evaluation: not padded, the short batch split as it is (true counts; a rank may get nothing).
  int64_t rows = 0;
  for (int r = 0; r < 4; ++r) {
    DataLoader dl(ds, {.batch_size = 8, .seed = 3, .shard_rank = r, .shard_count = 4, .pad_last_batch = false});
    for (auto& b : epoch_of(dl))
      if (!b.empty()) rows += b[0].size(0);
  }
  EXPECT_EQ(rows, 22);
  EXPECT_NE(error_of([&] { DataLoader(ds, {.batch_size = 9, .shard_rank = 0, .shard_count = 4}); })
                .find("does not divide among 4 ranks"),
            std::string::npos);
  EXPECT_NE(error_of([&] { DataLoader(ds, {.batch_size = 8, .shard_rank = 4, .shard_count = 4}); }).find("shard_rank 4"),
            std::string::npos);
}

TEST(DataLoader, ResumesMidEpochAtTheSameBatch) {
  auto ds = augmented_dataset(50);
  DataLoader ref(ds, {.batch_size = 4, .shuffle = true, .seed = 3, .num_workers = 2});
  auto full = epoch_of(ref);
  auto second = epoch_of(ref);
  DataLoader a(ds, {.batch_size = 4, .shuffle = true, .seed = 3, .num_workers = 2});
  for (int i = 0; i < 5; ++i) a.next();
  nlohmann::json state = a.state();
  DataLoader b(ds, {.batch_size = 4, .shuffle = true, .seed = 99, .num_workers = 1});
  b.load_state(state);
  auto rest = epoch_of(b);
  ASSERT_EQ(rest.size(), full.size() - 5);
  EXPECT_TRUE(same(rest, std::vector<TensorList>(full.begin() + 5, full.end())));
  EXPECT_TRUE(same(epoch_of(b), second));
  EXPECT_THROW(b.load_state({{"epoch", 0}, {"batch", 999}}), Error);
  EXPECT_THROW(b.load_state({{"epoch", "x"}}), Error);
}

TEST(DataLoader, DropLastCustomCollateAndWorkerErrors) {
  auto ds = std::make_shared<TensorDataset>(TensorList{arange(10, DType::I64)});
  DataLoaderOptions o{.batch_size = 4, .drop_last = true, .num_workers = 2};
  o.collate = [](const std::vector<Example>& s) { return Example{scalar_tensor(int64_t(s.size()), DType::I64)}; };
  DataLoader dl(ds, o);
  auto e = epoch_of(dl);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1][0].item<int64_t>(), 4);
  struct Bad : Dataset {
    int64_t size() const override { return 8; }
    Example get(int64_t i) const override {
      TS_CHECK(i != 5, "sample 5 is broken");
      return {scalar_tensor(i, DType::I64)};
    }
  };
  DataLoader bad(std::make_shared<Bad>(), {.batch_size = 2, .num_workers = 2});
  bad.next();
  bad.next();
  EXPECT_THROW(bad.next(), Error);
}

TEST(Shards, TarRoundTripAndStreamingWithShuffle) {
  auto dir = fs::temp_directory_path() / ("tessera_shards_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    ShardWriter w((dir / "train-%04d.tar").string(), 10);
    for (int64_t i = 0; i < 35; ++i)
      w.write("s" + std::to_string(i), {{"x.npy", full({2, 3}, static_cast<double>(i))},
                                        {"y.cls", scalar_tensor(i, DType::I64)}});
    w.close();
    EXPECT_EQ(w.shards().size(), 4u);
  }
  auto shards = expand_shards(dir.string());
  ASSERT_EQ(shards.size(), 4u);
  EXPECT_EQ(expand_shards((dir / "train-{0000..0003}.tar").string()), shards);
  std::vector<char> raw = io::read_file(shards[0]);
  auto entries = parse_tar(raw.data(), raw.size());
  ASSERT_EQ(entries.size(), 20u);
  EXPECT_EQ(entries[0].name, "s0.x.npy");
  for (int workers : {0, 2}) {
    auto ds = std::make_shared<ShardedDataset>(shards, std::vector<std::string>{"x.npy", "y.cls"}, 8);
    DataLoader dl(ds, {.batch_size = 4, .seed = 1, .num_workers = workers});
    std::vector<int64_t> labels;
    while (auto b = dl.next()) {
      auto y = (*b)[1].to_vector<int64_t>();
      for (size_t k = 0; k < y.size(); ++k)
        EXPECT_EQ((*b)[0].select(0, static_cast<int64_t>(k)).to_vector<float>()[0], static_cast<float>(y[k]));
      labels.insert(labels.end(), y.begin(), y.end());
    }
    std::vector<int64_t> sorted = labels;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted.size(), 35u);
    for (int64_t i = 0; i < 35; ++i) EXPECT_EQ(sorted[i], i);
    EXPECT_NE(labels, sorted);  // shuffled
  }
  // a corrupted shard is an error naming the file
  std::string bad(raw.begin(), raw.end());
  bad[150] ^= 1;  // inside the first header: the checksum no longer matches
  EXPECT_THROW(parse_tar(bad.data(), bad.size(), "shard"), Error);
  EXPECT_THROW(parse_tar(raw.data(), 700, "shard"), Error);  // truncated
  fs::remove_all(dir);
}

namespace {
// One 512-byte ustar header, as tar programs write them (for archives the
// writer does not make: GNU long names).
std::string tar_block(const std::string& name, size_t size, char type) {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(&h[100], 8, "%07o", 0644);
  std::snprintf(&h[124], 12, "%011zo", size);
  h[156] = type;
  std::memcpy(&h[257], "ustar  ", 8);  // old GNU magic: no prefix field
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(&h[148], 8, "%06o", sum);
  return h;
}
std::string tar_body(const std::string& b) { return b + std::string((512 - b.size() % 512) % 512, '\0'); }
}  // namespace

// Keys longer than a ustar header's 100-byte name: PAX "path" records (what
// ShardWriter, POSIX tar and Python write) and GNU 'L' entries (GNU tar's
// default) are read whole, never cut to 100 bytes.
TEST(Shards, LongNamesFromPaxAndGnuHeaders) {
  const std::string key = "sample/" + std::string(150, 'k') + "-0001";
  auto dir = fs::temp_directory_path() / ("tessera_long_names_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    ShardWriter w((dir / "long-%02d.tar").string(), 10);
    w.write(key, {{"x.npy", full({2}, 1.0)}, {"y.cls", scalar_tensor(int64_t{7}, DType::I64)}});
    w.close();
  }
  std::vector<char> raw = io::read_file((dir / "long-00.tar").string());
  auto entries = parse_tar(raw.data(), raw.size());
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].name, key + ".x.npy");
  EXPECT_EQ(entries[1].name, key + ".y.cls");
  auto ds = std::make_shared<ShardedDataset>(expand_shards(dir.string()), std::vector<std::string>{"x.npy", "y.cls"}, 0);
  DataLoader dl(ds, {.batch_size = 1});
  auto b = dl.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*b)[1].to_vector<int64_t>()[0], 7);

  // GNU: a '././@LongLink' entry of type 'L' holds the next file's name.
  const std::string gnu_name = key + ".y.cls";
  std::string gnu = tar_block("././@LongLink", gnu_name.size() + 1, 'L') + tar_body(gnu_name + std::string(1, '\0')) +
                    tar_block(gnu_name.substr(0, 100), 2, '0') + tar_body("42") + std::string(1024, '\0');
  entries = parse_tar(gnu.data(), gnu.size(), "gnu.tar");
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].name, gnu_name);
  EXPECT_EQ(entries[0].data, "42");
  // A long name with no file after it, and a malformed PAX record, are errors naming the archive.
  std::string dangling = tar_block("././@LongLink", gnu_name.size(), 'L') + tar_body(gnu_name) + std::string(1024, '\0');
  EXPECT_NE(error_of([&] { parse_tar(dangling.data(), dangling.size(), "gnu.tar"); }).find("is not followed by its file"),
            std::string::npos);
  std::string pax = tar_block("././@PaxHeader", 12, 'x') + tar_body("99 path=abc\n") + tar_block("f", 0, '0') +
                    std::string(1024, '\0');
  EXPECT_NE(error_of([&] { parse_tar(pax.data(), pax.size(), "pax.tar"); }).find("pax.tar: the PAX header at byte 0"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(Datasets, TextCsvSyntheticAndMissingFiles) {
  TextDataset bytes("hello world, hello tessera", 4, "byte");
  EXPECT_EQ(bytes.vocab_size(), 256);
  auto s = bytes.get(0);
  EXPECT_EQ(bytes.decode(s[0]), "hell");
  EXPECT_EQ(bytes.decode(s[1]), "ello");
  TextDataset chars("abcabcé", 2, "char");
  EXPECT_EQ(chars.vocab_size(), 4);  // a b c é
  EXPECT_EQ(chars.decode(chars.encode("cé")), "cé");
  EXPECT_THROW(chars.encode("z"), Error);

  auto dir = fs::temp_directory_path() / ("tessera_csv_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  { std::ofstream(dir / "t.csv") << "a,b,label\n1,2,0\n3.5,-1,1\n"; }
  auto ds = csv_dataset((dir / "t.csv").string());
  EXPECT_EQ(ds->size(), 2);
  EXPECT_EQ(ds->get(1)[0].to_vector<float>(), (std::vector<float>{3.5f, -1}));
  EXPECT_EQ(ds->get(1)[1].item<int64_t>(), 1);
  { std::ofstream(dir / "bad.csv") << "1,2\n3\n"; }
  try {
    read_csv((dir / "bad.csv").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv:2: has 1 fields, expected 2"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);

  SyntheticImages img(10, 3, 8, 8, 5);
  EXPECT_TRUE(ops::all(ops::eq(img.get(3)[0], img.get(3)[0])).item<bool>());
  EXPECT_EQ(img.get(7)[1].item<int64_t>(), 2);
  try {
    FashionMNIST("/nonexistent", "train");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/train-images-idx3-ubyte"), std::string::npos) << e.what();
  }
  try {
    FashionMNIST(kFashionMNISTRoot, "validation");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'train' or 'test'"), std::string::npos);
  }
}

TEST(Datasets, FashionMNISTFromDebianPackage) {
  if (!fs::exists(kFashionMNISTRoot)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FashionMNIST test(kFashionMNISTRoot, "test");
  EXPECT_EQ(test.size(), 10000);
  auto e = test.get(0);
  EXPECT_EQ(shape_str(e[0].shape()), "[1, 28, 28]");
  EXPECT_EQ(e[1].item<int64_t>(), 9);  // the first test image is an ankle boot
  auto b = test.get_batch({0, 1});
  EXPECT_CLOSE(b[0].select(0, 0), e[0], 1e-5, 1e-5);
}

TEST(Transforms, ValuesAndShapes) {
  Tensor img = arange(2 * 3 * 4, DType::F32).view({2, 3, 4});
  Tensor n = normalize({1.0, 2.0}, {2.0, 4.0})(img);
  EXPECT_FLOAT_EQ(n.select(0, 0).select(0, 0).select(0, 1).item<float>(), 0.0f);    // (1 - 1) / 2
  EXPECT_FLOAT_EQ(n.select(0, 1).select(0, 0).select(0, 0).item<float>(), 2.5f);    // (12 - 2) / 4
  seed_sample_generator(1, 0, 0);
  Tensor f = random_horizontal_flip(1.0)(img);
  EXPECT_TRUE(ops::all(ops::eq(f, ops::flip(img, {2}))).item<bool>());
  EXPECT_TRUE(ops::all(ops::eq(random_horizontal_flip(0.0)(img), img)).item<bool>());
  Tensor c = random_crop(3, 1)(img);
  EXPECT_EQ(shape_str(c.shape()), "[2, 3, 3]");
  Tensor e = random_erasing(1.0, {0.3, 0.3}, {1.0, 1.0}, -7.0)(ops::add(img, 100.0));
  EXPECT_GT(ops::sum(ops::eq(e, -7.0)).item<int64_t>(), 0);  // a rectangle was filled, in every channel
  EXPECT_THROW(normalize({0.5}, {0.0}), Error);
  EXPECT_THROW(random_crop(5)(img), Error);  // larger than the image
}
