// GGUF files (llm/gguf.h): a file assembled byte by byte from the
// specification parses to what it says; the writer's files read back equal,
// from memory and memory-mapped; every truncation and each kind of hostile
// file (counts, lengths, offsets and dimensions that lie, unknown types,
// duplicates, overlaps) is an error that names the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <filesystem>
#include <unistd.h>
#include <string>
#include <vector>

#include "tessera/io/file.h"
#include "tessera/core/half.h"
#include "tessera/llm/gguf.h"
#include "tessera/ops/ops.h"
#include "tessera/llm/engine.h"
#include "tessera/llm/tokenizer.h"
#include "test_util.h"

namespace tessera {
namespace {

using llm::GgmlType;
using llm::GgufFile;
using llm::GgufType;
using llm::GgufValue;
using llm::GgufWriter;

// Little-endian bytes, assembled by hand.
struct Bytes {
  std::string s;
  template <typename T>
  Bytes& put(T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& raw(std::string_view v) {
    s.append(v);
    return *this;
  }
  Bytes& str(std::string_view v) { return u64(v.size()).raw(v); }
  Bytes& pad(size_t a) {
    while (s.size() % a) s += '\0';
    return *this;
  }
  Bytes& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(tensors).u64(kvs);
  }
  Bytes& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
};

std::string error_of_parse(const std::string& bytes) {
  return testing::error_of([&] { GgufFile::parse(bytes.data(), bytes.size(), "test.gguf"); });
}

void expect_rejected(const std::string& bytes, const std::string& want) {
  std::string e = error_of_parse(bytes);
  EXPECT_NE(e.find(want), std::string::npos) << "wanted '" << want << "', got: " << (e.empty() ? "no error" : e);
}

// One string key, one u32 key, and a 2x4 f32 tensor: the specification's layout.
std::string small_file() {
  Bytes b;
  b.header(1, 2).str("general.architecture").u32(8).str("llama").str("llama.block_count").u32(4).u32(6);
  b.tensor("w", {4, 2}, 0, 0).pad(32);
  for (int i = 0; i < 8; ++i) b.put(static_cast<float>(i) * 0.5f);
  return b.s;
}

TEST(Gguf, AHandAssembledFileParses) {
  const std::string bytes = small_file();
  GgufFile f = GgufFile::parse(bytes.data(), bytes.size());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].first, "general.architecture");
  EXPECT_EQ(f.get("general.architecture").as_string(), "llama");
  EXPECT_EQ(f.get("llama.block_count").type(), GgufType::U32);
  EXPECT_EQ(f.get("llama.block_count").as_int(), 6);
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_NE(testing::error_of([&] { f.get("missing"); }).find("has no key 'missing'"), std::string::npos);
  ASSERT_EQ(f.tensors().size(), 1u);
  const auto& t = f.tensors()[0];
  EXPECT_EQ(t.ne, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(t.shape(), (Shape{2, 4}));
  EXPECT_EQ(t.nbytes, 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  Tensor w = f.tensor("w");
  EXPECT_EQ(w.shape(), (Shape{2, 4}));
  EXPECT_EQ(w.dtype(), DType::F32);
  EXPECT_FLOAT_EQ(w.data_ptr<float>()[5], 2.5f);
  EXPECT_NE(testing::error_of([&] { f.tensor("v"); }).find("no tensor named 'v'"), std::string::npos);
}

GgufWriter every_kind_of_value_and_tensor(uint32_t alignment) {
  GgufWriter w(alignment);
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("t.u8", GgufValue::integer(GgufType::U8, 200));
  w.set("t.i8", GgufValue::integer(GgufType::I8, -100));
  w.set("t.u16", GgufValue::integer(GgufType::U16, 60000));
  w.set("t.i16", GgufValue::integer(GgufType::I16, -30000));
  w.set("t.u32", GgufValue::integer(GgufType::U32, 4000000000));
  w.set("t.i32", GgufValue::integer(GgufType::I32, -2000000000));
  w.set("t.u64", GgufValue::integer(GgufType::U64, static_cast<int64_t>(~uint64_t{0})));
  w.set("t.i64", GgufValue::integer(GgufType::I64, -(int64_t{1} << 60)));
  w.set("t.f32", GgufValue::floating(GgufType::F32, 0.25));
  w.set("t.f64", GgufValue::floating(GgufType::F64, 1e-300));
  w.set("t.bool", GgufValue::boolean(true));
  w.set("t.empty", GgufValue::string(""));
  w.set("t.tokens", GgufValue::strings({"<s>", "</s>", "\xe2\x96\x81the", ""}));
  w.set("t.scores", GgufValue::floats(GgufType::F32, {0.0, -1.5, 3.25}));
  w.set("t.types", GgufValue::integers(GgufType::I32, {1, 2, 3, -4}));
  w.set("t.flags", GgufValue::bools({true, false, true}));
  w.set("t.none", GgufValue::integers(GgufType::U64, {}));
  w.add_tensor("f32", arange(0, 15, 1, DType::F32).reshape({3, 5}));
  w.add_tensor("f16", arange(0, 6, 1, DType::F32).to(DType::F16).reshape({2, 3}));
  w.add_tensor("bf16", arange(0, 7, 1, DType::F32).to(DType::BF16));
  Tensor q8 = ops::randint(0, 256, {2 * 2 * 34}).to(DType::U8);  // 2 rows of 64: 2 Q8_0 blocks each
  w.add_tensor("q8", GgmlType::Q8_0, {64, 2}, q8);
  Tensor q4k = ops::randint(0, 256, {144}).to(DType::U8);
  w.add_tensor("q4k", GgmlType::Q4_K, {256}, q4k);
  return w;
}

void expect_every_kind(const GgufFile& f, uint32_t alignment) {
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.get("t.u8").as_int(), 200);
  EXPECT_EQ(f.get("t.i8").as_int(), -100);
  EXPECT_EQ(f.get("t.u16").as_int(), 60000);
  EXPECT_EQ(f.get("t.i16").as_int(), -30000);
  EXPECT_EQ(f.get("t.u32").as_uint(), 4000000000u);
  EXPECT_EQ(f.get("t.i32").as_int(), -2000000000);
  EXPECT_EQ(f.get("t.u64").as_uint(), ~uint64_t{0});
  EXPECT_EQ(f.get("t.i64").as_int(), -(int64_t{1} << 60));
  EXPECT_EQ(f.get("t.f32").as_float(), 0.25);
  EXPECT_EQ(f.get("t.f64").as_float(), 1e-300);
  EXPECT_TRUE(f.get("t.bool").as_bool());
  EXPECT_EQ(f.get("t.empty").as_string(), "");
  EXPECT_EQ(f.get("t.tokens").as_strings(), (std::vector<std::string>{"<s>", "</s>", "\xe2\x96\x81the", ""}));
  EXPECT_EQ(f.get("t.scores").as_floats(), (std::vector<double>{0.0, -1.5, 3.25}));
  EXPECT_EQ(f.get("t.types").as_ints(), (std::vector<int64_t>{1, 2, 3, -4}));
  EXPECT_EQ(f.get("t.flags").as_ints(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(f.get("t.flags").elem_type(), GgufType::Bool);
  EXPECT_EQ(f.get("t.none").size(), 0u);
  EXPECT_EQ(f.get("t.types").type_str(), "array[i32]");
  EXPECT_CLOSE(f.tensor("f32"), arange(0, 15, 1, DType::F32).reshape({3, 5}), 0, 0);
  EXPECT_EQ(f.tensor("f16").dtype(), DType::F16);
  EXPECT_CLOSE(f.tensor("f16").to(DType::F32), arange(0, 6, 1, DType::F32).reshape({2, 3}), 0, 0);
  EXPECT_EQ(f.tensor("bf16").shape(), (Shape{7}));
  EXPECT_EQ(f.tensor("q8").shape(), (Shape{2, 68}));
  EXPECT_EQ(f.tensor("q4k").shape(), (Shape{1, 144}));
  for (const auto& t : f.tensors()) EXPECT_EQ(t.offset % alignment, 0u) << t.name;
}

TEST(Gguf, WrittenFilesReadBackEqual) {
  for (uint32_t alignment : {32u, 64u}) {
    GgufWriter w = every_kind_of_value_and_tensor(alignment);
    const std::string bytes = w.bytes();
    GgufFile f = GgufFile::parse(bytes.data(), bytes.size());
    expect_every_kind(f, alignment);
    EXPECT_EQ(f.tensor("q8").numel(), 136);

    const std::string path =
        (std::filesystem::temp_directory_path() / ("tessera_gguf_" + std::to_string(::getpid()) + ".gguf")).string();
    w.save(path);
    GgufFile m = GgufFile::open(path);
    expect_every_kind(m, alignment);
    EXPECT_EQ(m.file_size(), bytes.size());
    EXPECT_EQ(std::memcmp(m.tensor("q8").raw_data(), f.tensor("q8").raw_data(), 136), 0);
    std::filesystem::remove(path);
  }
}

// Kilobytes of the mapping of `path` resident in this process (its Rss line in
// /proc/self/smaps); -1 if the file is not mapped.
int64_t mapped_rss_kb(const std::string& path) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool ours = false;
  while (std::getline(in, line)) {
    // A mapping's line ("start-end perms offset dev inode path"), then its
    // "Key: value" lines.
    const std::string first = line.substr(0, line.find(' '));
    if (!first.ends_with(":")) ours = line.ends_with(path);
    else if (ours && first == "Rss:") return std::stoll(line.substr(4));
  }
  return -1;
}

// release() drops a tensor's pages from the process (the engine does so for
// the matrices it repacks); reading them again gives the file's bytes.
TEST(Gguf, ReleasedPagesLeaveTheProcessAndReadBackUnchanged) {
  std::vector<float> values(1 << 18);  // 1 MiB
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000) * 0.5f;
  GgufWriter w;
  w.add_tensor("big", tensor(values));
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tessera_gguf_release_" + std::to_string(::getpid()) + ".gguf")).string();
  w.save(path);
  {
    GgufFile f = GgufFile::open(path);
    const auto& t = f.tensor_info("big");
    const char* p = f.tensor_data(t);
    const int64_t bytes = static_cast<int64_t>(values.size() * sizeof(float));
    ASSERT_EQ(std::memcmp(p, values.data(), bytes), 0);  // every page read in
    const int64_t before = mapped_rss_kb(path);
    ASSERT_GE(before, bytes / 1024);
    f.release(p, static_cast<size_t>(bytes));
    const int64_t after = mapped_rss_kb(path);
    // All but the partial pages at either end and the header's page leave.
    EXPECT_LE(after, before - bytes / 1024 + 16) << "before " << before << " KiB";
    EXPECT_EQ(std::memcmp(p, values.data(), bytes), 0);
    EXPECT_NE(testing::error_of([&] { f.release(p, f.file_size() + 1); }).find("not in"), std::string::npos);
  }
  // A parsed image is not a mapping: nothing to release, nothing changes.
  const std::string image = w.bytes();
  GgufFile m = GgufFile::parse(image.data(), image.size());
  const char* q = m.tensor_data(m.tensor_info("big"));
  m.release(q, values.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(q, values.data(), values.size() * sizeof(float)), 0);
  std::filesystem::remove(path);
}

TEST(Gguf, ValuesOfTheWrongTypeNameTheKey) {
  GgufWriter w;
  w.set("llama.context_length", GgufValue::string("2048"));
  const std::string bytes = w.bytes();
  GgufFile f = GgufFile::parse(bytes.data(), bytes.size());
  const GgufValue& v = f.get("llama.context_length");
  EXPECT_NE(testing::error_of([&] { v.as_int("llama.context_length"); })
                .find("llama.context_length is string, not an integer"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { GgufValue::integer(GgufType::I8, -1).as_uint("x"); }).find("x = -1 is negative"),
            std::string::npos);
  EXPECT_EQ(GgufValue::strings({"a", "b"}).summary(), "[\"a\", \"b\"] (2)");
}

// Loading a model or a tokenizer names the file a wrong-typed key is in.
TEST(Gguf, TypeErrorsNameTheFile) {
  const std::string path = testing::scratch_dir("gguf_types") + ".gguf";
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("llama.embedding_length", GgufValue::string("768"));
  w.set("tokenizer.ggml.model", GgufValue::integer(GgufType::U32, 1));
  w.save(path);
  const std::string model = testing::error_of([&] { llm::Model::load(path); });
  EXPECT_NE(model.find(path), std::string::npos) << model;
  EXPECT_NE(model.find("llama.embedding_length is string, not an integer"), std::string::npos) << model;
  const std::string tok = testing::error_of([&] { llm::Tokenizer::from_gguf(GgufFile::open(path)); });
  EXPECT_NE(tok.find(path), std::string::npos) << tok;
  EXPECT_NE(tok.find("not a string"), std::string::npos) << tok;
  std::filesystem::remove(path);
}

TEST(Gguf, EveryTruncationIsAnError) {
  const std::string bytes = every_kind_of_value_and_tensor(32).bytes();
  GgufFile whole = GgufFile::parse(bytes.data(), bytes.size());
  const auto& last = whole.tensors().back();
  const size_t end = whole.data_offset() + last.offset + last.nbytes;  // then only the padding, which may go
  // Cut inside the header, the metadata and the tensor infos (each a short
  // read), or in the data section (a tensor past the end).
  for (size_t n = 0; n < end; ++n) {
    if (n > 600 && n % 7) continue;  // the data section: a sample of the cuts
    std::string e = error_of_parse(bytes.substr(0, n));
    EXPECT_FALSE(e.empty()) << "a file cut to " << n << " of " << bytes.size() << " bytes was accepted";
  }
}

TEST(Gguf, HostileFilesAreErrorsThatSayWhy) {
  expect_rejected("GGML", "not a GGUF file");
  expect_rejected(Bytes().header(0, 0, 1).s, "GGUF version 1");
  expect_rejected(Bytes().header(0, 0, 4).s, "GGUF version 4 is not supported");
  expect_rejected(Bytes().header(uint64_t{1} << 60, 0).s, "claims 1152921504606846976 tensors");
  expect_rejected(Bytes().header(0, 1000).s, "claims 1000 metadata entries");
  // A string, an array, whose length is more than the file.
  const std::string filler(32, '\0');  // so that the counts are believable and the named check is reached
  expect_rejected(Bytes().header(0, 1).u64(uint64_t{1} << 62).raw("k").raw(filler).s,
                  "needs 4611686018427387904 bytes");
  expect_rejected(Bytes().header(0, 1).str("k").u32(9).u32(4).u64(uint64_t{1} << 40).s,
                  "claims 1099511627776 elements of u32");
  expect_rejected(Bytes().header(0, 1).str("k").u32(9).u32(8).u64(2).str("a").u64(100).raw("xy").s,
                  "needs 100 bytes");
  expect_rejected(Bytes().header(0, 1).str("k").u32(13).u32(0).s, "value type 13");
  expect_rejected(Bytes().header(0, 1).str("k").u32(9).u32(9).u64(0).s, "array of arrays");
  expect_rejected(Bytes().header(0, 1).str("k").u32(7).put(uint8_t{2}).s, "bool of byte value 2");
  expect_rejected(Bytes().header(0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2).s, "key 'k' appears twice");
  expect_rejected(Bytes().header(0, 1).str("").u32(4).u32(1).s, "is empty");
  expect_rejected(Bytes().header(0, 1).str("general.alignment").u32(4).u32(48).s, "48 is not a power of two");
  expect_rejected(Bytes().header(0, 1).str("general.alignment").u32(10).u64(32).s, "is u64 (must be u32)");

  auto one_tensor = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset, uint64_t data_bytes,
                       std::string name = "w") {
    Bytes b;
    b.header(1, 0).tensor(name, std::move(ne), type, offset).pad(32);
    b.s.append(data_bytes, '\0');
    return b.s;
  };
  EXPECT_EQ(error_of_parse(one_tensor({8}, 0, 0, 32)), "");
  expect_rejected(one_tensor({}, 0, 0, 32), "has 0 dimensions (1 to 4)");
  expect_rejected(one_tensor({1, 1, 1, 1, 1}, 0, 0, 32), "has 5 dimensions (1 to 4)");
  expect_rejected(one_tensor({uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0, 32), "dimensions too large to address");
  expect_rejected(one_tensor({~uint64_t{0}}, 0, 0, 32), "dimensions too large to address");
  expect_rejected(one_tensor({32}, 16, 0, 64), "ggml type 16 (IQ2_XXS)");
  expect_rejected(one_tensor({32}, 16, 0, 64), "which Tessera does not read (it reads F32, F16, BF16, Q8_0");
  expect_rejected(one_tensor({32}, 1000, 0, 64), "ggml type 1000 at byte");
  expect_rejected(one_tensor({33}, 8, 0, 64), "rows of 33 elements, not a whole number of blocks of 32");
  expect_rejected(one_tensor({8}, 0, 4, 64), "data offset 4, not a multiple of the alignment 32");
  expect_rejected(one_tensor({8}, 0, 0, 31), "runs past the end of the 31-byte data section");
  expect_rejected(one_tensor({8}, 0, uint64_t{1} << 63, 32), "runs past the end");
  expect_rejected(one_tensor({8}, 0, 0, 32, ""), "an empty name");
  expect_rejected(one_tensor({8}, 0, 0, 32, std::string(64, 'x')), "a name longer than 63 bytes");
  {
    Bytes b;
    b.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad(32);
    b.s.append(96, '\0');
    expect_rejected(b.s, "tensors 'a' and 'b' overlap");
    Bytes d;
    d.header(2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).pad(32);
    d.s.append(64, '\0');
    expect_rejected(d.s, "tensor name 'a' appears twice");
  }
  // An empty tensor may share its offset with the next one.
  {
    Bytes b;
    b.header(2, 0).tensor("empty", {0, 8}, 0, 0).tensor("w", {8}, 0, 0).pad(32);
    b.s.append(32, '\0');
    EXPECT_EQ(error_of_parse(b.s), "");
  }
  // The header ends, with tensors, before the data section could start.
  expect_rejected(Bytes().header(1, 0).tensor("w", {8}, 0, 0).s, "past the end of the");
}

TEST(Gguf, TypesAndNames) {
  for (GgmlType t : llm::kGgmlTypes) EXPECT_EQ(llm::ggml_type_from_name(llm::ggml_type_name(t)), t);
  EXPECT_EQ(llm::ggml_type_from_name("q4_k"), GgmlType::Q4_K);
  EXPECT_EQ(llm::ggml_type_from_name("Q5_K"), std::nullopt);
  EXPECT_EQ(llm::ggml_row_bytes(GgmlType::Q8_0, 4096), 128 * 34);
  EXPECT_EQ(llm::ggml_row_bytes(GgmlType::Q6_K, 4096), 16 * 210);
  EXPECT_EQ(llm::ggml_row_bytes(GgmlType::BF16, 10), 20);
  EXPECT_NE(testing::error_of([] { llm::ggml_row_bytes(GgmlType::Q4_0, 48); }).find("not a whole number"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { GgufValue::integer(GgufType::U8, 300); }).find("300 does not fit u8"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { GgufValue::integers(GgufType::I16, {1, 40000}); }).find("40000 does not fit i16"),
            std::string::npos);
  GgufWriter w;
  EXPECT_NE(testing::error_of([&] { w.set("general.alignment", GgufValue::integer(GgufType::U32, 64)); })
                .find("give it to the constructor"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { w.add_tensor("x", ones({2}, DType::I64)); })
                .find("tensor 'x' is i64; write F32, F16 or BF16"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { w.add_tensor("x", GgmlType::Q8_0, {32}, zeros({33}, DType::U8)); })
                .find("needs 34 bytes of Q8_0 data, got 33 u8"),
            std::string::npos);
}

// `tessera gguf info`: the version, the metadata and the tensors; a bad file
// is an error exit naming the problem.
TEST(Gguf, CliInfo) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tessera_gguf_cli_" + std::to_string(::getpid()) + ".gguf")).string();
  every_kind_of_value_and_tensor(32).save(path);
  std::string out;
  ASSERT_EQ(testing::cli("gguf info " + path, &out), 0) << out;
  for (const char* want : {"GGUF version 3", "alignment 32", "metadata (18 keys)", "general.architecture",
                           "string         \"llama\"", "t.tokens", "array[string]", "(4)", "tensors (5,",
                           "q4k", "Q4_K", "[256]", "f16", "[2, 3]"})
    EXPECT_NE(out.find(want), std::string::npos) << want << " missing from:\n" << out;
  std::string bytes = every_kind_of_value_and_tensor(32).bytes();
  bytes.resize(100);
  io::write_file_atomic(path, [&](io::Writer& w) { w.write(bytes); });
  EXPECT_EQ(testing::cli("gguf info " + path, &out), 1) << out;
  EXPECT_NE(out.find("error: " + path + ": "), std::string::npos) << out;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// K-quant super-blocks packed here from known scales and codes by ggml's
// layout (ggml-common.h): the dequantized values are d * scale * code (Q6_K)
// and d * scale * code - dmin * min (Q4_K), group by group in order.
TEST(Gguf, DequantizesKQuantSuperBlocks) {
  std::mt19937 g(5);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  // Q6_K: 16 groups of 16 values, int8 scales, codes -32..31.
  std::vector<uint8_t> q6(2 * 210, 0);
  std::vector<float> want6(512);
  for (int b = 0; b < 2; ++b) {
    uint8_t* x = q6.data() + b * 210;
    const float d = b ? 0.0125f : 0.5f;
    const uint16_t dh = Half::from_float(d);
    std::memcpy(x + 208, &dh, 2);
    int8_t sc[16];
    for (int i = 0; i < 16; ++i) sc[i] = static_cast<int8_t>(pick(-128, 127));
    std::memcpy(x + 192, sc, 16);
    for (int i = 0; i < 256; ++i) {
      const int q = pick(-32, 31), u = q + 32;
      const int h = i / 128, k = (i % 128) / 32, l = i % 32;
      uint8_t* ql = x + h * 64 + l + (k % 2 ? 32 : 0);
      *ql |= static_cast<uint8_t>(k < 2 ? (u & 15) : (u & 15) << 4);
      x[128 + h * 32 + l] |= static_cast<uint8_t>((u >> 4) << (2 * k));
      want6[b * 256 + i] = Half::to_float(dh) * sc[i / 16] * q;
    }
  }
  // Through the backend's dequantizer (every row of a [1, bytes] u8 matrix).
  auto dequantize = [](const std::vector<uint8_t>& bytes, const char* format) {
    Tensor t = ops::dequantize_weight(tensor(bytes).reshape({1, static_cast<int64_t>(bytes.size())}), {}, {}, format);
    const float* p = t.contiguous().data_ptr<float>();
    return std::vector<float>(p, p + t.numel());
  };
  EXPECT_EQ(dequantize(q6, "q6_k"), want6);
  // Q4_K: 8 groups of 32 values, 6-bit scales and mins, codes 0..15.
  std::vector<uint8_t> q4(144, 0);
  std::vector<float> want4(256);
  const uint16_t dh = Half::from_float(0.25f), mh = Half::from_float(0.125f);
  std::memcpy(q4.data(), &dh, 2);
  std::memcpy(q4.data() + 2, &mh, 2);
  int sc[8], mn[8];
  for (int s = 0; s < 8; ++s) sc[s] = pick(0, 63), mn[s] = pick(0, 63);
  uint8_t* k = q4.data() + 4;
  for (int s = 0; s < 4; ++s) {
    k[s] = static_cast<uint8_t>(sc[s] | ((sc[s + 4] >> 4) << 6));
    k[s + 4] = static_cast<uint8_t>(mn[s] | ((mn[s + 4] >> 4) << 6));
    k[s + 8] = static_cast<uint8_t>((sc[s + 4] & 15) | ((mn[s + 4] & 15) << 4));
  }
  for (int i = 0; i < 256; ++i) {
    const int q = pick(0, 15), s = i / 32, j = i / 64, l = i % 32;
    q4[16 + j * 32 + l] |= static_cast<uint8_t>(s % 2 ? q << 4 : q);
    want4[i] = 0.25f * sc[s] * q - 0.125f * mn[s];
  }
  EXPECT_EQ(dequantize(q4, "q4_k"), want4);
}

}  // namespace
}  // namespace tessera
