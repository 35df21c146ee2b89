// safetensors, .npy and YAML configs: round trips, files written by other
// implementations, and hostile input (every malformed file is an Error naming
// the problem, never a crash).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "tessera/data/shards.h"
#include "tessera/io/config.h"
#include "tessera/io/npy.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::io;

namespace {
std::string tmp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("tessera_io_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}
std::string with_header(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}
const std::string kDataDir = std::string(TESSERA_SOURCE_DIR) + "/tests/io/data/";
}  // namespace

TEST(Safetensors, ReadsAFileWrittenByHandPerTheSpec) {
  float a[2] = {1.5f, -2.0f};
  int64_t b = 7;
  std::string data(reinterpret_cast<const char*>(a), 8);
  data.append(reinterpret_cast<const char*>(&b), 8);
  std::string file = with_header(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I64","shape":[1,1],"data_offsets":[8,16]}})",
      data);
  auto f = SafetensorsFile::parse(file.data(), file.size());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.get("a").to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f.get("b").item<int64_t>(), 7);
  EXPECT_EQ(shape_str(f.get("b").shape()), "[1, 1]");
}

TEST(Safetensors, ReadsTheFileWrittenByPython) {
  // tests/golden/layers.safetensors was written by generate_train.py (Python).
  auto f = SafetensorsFile::open(std::string(TESSERA_GOLDEN_DIR) + "/layers.safetensors");
  EXPECT_GT(f.names().size(), 1000u);
  Tensor w = f.get("Linear/basic/param/weight");
  EXPECT_EQ(w.dtype(), DType::F64);
  EXPECT_EQ(w.dim(), 2);
}

TEST(Safetensors, RoundTripEveryDtypeWithMetadata) {
  NamedTensors ts = {{"f32", ops::randn({3, 4})},
                     {"f64", ops::randn({2}, DType::F64)},
                     {"f16", ops::randn({5}).to(DType::F16)},
                     {"bf16", ops::randn({2, 2}).to(DType::BF16)},
                     {"i64", arange(6, DType::I64).view({2, 3})},
                     {"i32", arange(3, DType::I32)},
                     {"u8", arange(4, DType::U8)},
                     {"i8", arange(4, DType::I8)},
                     {"bool", tensor(std::vector<bool>{true, false})},
                     {"scalar", scalar_tensor(3.0, DType::F32)},
                     {"empty", zeros({0, 3})},
                     {"strided", ops::randn({4, 4}).t()}};
  std::string path = tmp_path("all.safetensors");
  save_safetensors(path, ts, {{"note", "hello"}});
  Metadata meta;
  NamedTensors back = load_safetensors(path, &meta);
  EXPECT_EQ(meta.at("note"), "hello");
  ASSERT_EQ(back.size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ(back[i].first, ts[i].first);
    EXPECT_EQ(back[i].second.dtype(), ts[i].second.dtype());
    EXPECT_TRUE(ops::all(ops::eq(back[i].second, ts[i].second)).item<bool>()) << ts[i].first;
  }
  // the header is 8-byte aligned and the bytes match safetensors_bytes
  std::vector<char> bytes = read_file(path);
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), safetensors_bytes(ts, {{"note", "hello"}}));
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST(Safetensors, MalformedFilesAreClearErrors) {
  auto err = [](const std::string& bytes) {
    return tessera::testing::error_of([&] { SafetensorsFile::parse(bytes.data(), bytes.size(), "f"); });
  };
  EXPECT_NE(err("abc").find("too short"), std::string::npos);
  EXPECT_NE(err(with_header("{}", "") .substr(0, 8) + "{").find("runs past the end"), std::string::npos);
  EXPECT_NE(err(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8)).find("exceeds the 100 MB limit"),
            std::string::npos);
  EXPECT_NE(err(with_header("[1,2]", "")).find("JSON object"), std::string::npos);
  EXPECT_NE(err(with_header("{\"a\":", "")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(err(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "1234")).find("outside"),
            std::string::npos);
  EXPECT_NE(err(with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678")).find("needs 12"),
            std::string::npos);
  EXPECT_NE(err(with_header(R"({"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", "12345678")).find("'C64'"),
            std::string::npos);
  EXPECT_NE(err(with_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "1234")).find("shape"),
            std::string::npos);
  EXPECT_NE(err(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "12345678")).find("holes"),
            std::string::npos);
  EXPECT_NE(err(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                            "1234"))
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(err(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "12345")).find("not part of"),
            std::string::npos);
  EXPECT_NE(err(with_header(R"({"__metadata__":{"k":1}})", "")).find("must be a string"), std::string::npos);
  // found by fuzzing: zero-size tensors with huge other dims, bools that are not 0/1
  EXPECT_NE(err(with_header(R"({"a":{"dtype":"F32","shape":[0,1099511627776,1099511627776],"data_offsets":[0,0]}})",
                            "")).find("impossibly large"),
            std::string::npos);
  std::string bools = with_header(R"({"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x07", 2));
  EXPECT_NE(tessera::testing::error_of([&] { SafetensorsFile::parse(bools.data(), bools.size()).get("b"); }).find("byte value 7"),
            std::string::npos);
  EXPECT_NE(tessera::testing::error_of([] { SafetensorsFile::open("/nonexistent/x.safetensors"); }).find("cannot open"),
            std::string::npos);
}

TEST(Npy, ReadsFilesWrittenByNumPy) {
  Tensor a = load_npy(kDataDir + "f32_2x3.npy");
  EXPECT_EQ(a.dtype(), DType::F32);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1, 1.25f}));
  Tensor f = load_npy(kDataDir + "f64_fortran.npy");  // Fortran order
  EXPECT_TRUE(ops::all(ops::eq(f, arange(12, DType::F64).view({3, 4}))).item<bool>());
  EXPECT_EQ(load_npy(kDataDir + "i64_scalar.npy").item<int64_t>(), 42);
  EXPECT_EQ(load_npy(kDataDir + "i64_scalar.npy").dim(), 0);
  EXPECT_EQ(load_npy(kDataDir + "bool_4.npy").dtype(), DType::Bool);
  EXPECT_EQ(load_npy(kDataDir + "u8_2x2.npy").to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2, 250, 255}));
  EXPECT_EQ(load_npy(kDataDir + "f16_3.npy").to(DType::F32).to_vector<float>(), (std::vector<float>{0.5f, -2, 65504}));
}

TEST(Npy, RoundTripAndMatchesNumPyBytes) {
  std::vector<char> numpy = read_file(kDataDir + "f32_2x3.npy");
  Tensor a = load_npy(kDataDir + "f32_2x3.npy");
  EXPECT_EQ(npy_bytes(a), std::string(numpy.begin(), numpy.end()));  // byte-identical to numpy.save
  for (DType t : {DType::F32, DType::F64, DType::I64, DType::I32, DType::U8, DType::I8, DType::F16, DType::Bool}) {
    Tensor x = t == DType::Bool ? tensor(std::vector<bool>{true, false, true}) : arange(6).to(t).view({2, 3});
    std::string path = tmp_path("x.npy");
    save_npy(path, x);
    EXPECT_TRUE(ops::all(ops::eq(load_npy(path), x)).item<bool>()) << dtype_name(t);
  }
}

TEST(Npy, MalformedFilesAreClearErrors) {
  auto err = [](const std::string& b) { return tessera::testing::error_of([&] { parse_npy(b.data(), b.size(), "f"); }); };
  std::string good = npy_bytes(arange(4, DType::F32));
  EXPECT_NE(err("hello").find("not a .npy file"), std::string::npos);
  EXPECT_NE(err(good.substr(0, good.size() - 1)).find("truncated"), std::string::npos);
  EXPECT_NE(err(good + "x").find("trailing"), std::string::npos);
  std::string big = good;
  big[6] = 9;
  EXPECT_NE(err(big).find("version 9"), std::string::npos);
  std::string be = good;
  be.replace(be.find("<f4"), 3, ">f4");
  EXPECT_NE(err(be).find("'>f4'"), std::string::npos);
  std::string obj = good;
  obj.replace(obj.find("<f4"), 3, "|O8");
  EXPECT_NE(err(obj).find("unsupported dtype"), std::string::npos);
  std::string shape = good;
  shape.replace(shape.find("(4,)"), 4, "(a,)");
  EXPECT_NE(err(shape).find("integer"), std::string::npos);
  std::string b = npy_bytes(tensor(std::vector<bool>{true, false}));
  b.back() = 5;
  EXPECT_NE(err(b).find("byte value 5"), std::string::npos);
}

TEST(Config, YamlTypesUnknownKeysAndTypeErrors) {
  Config c(parse_yaml("batch_size: 64\nlr: 1e-3\nname: 'x'\nflag: true\nhidden: [1, 2]\nsub: {a: 1}\nbatch_sise: 3\n"));
  EXPECT_EQ(c.get<int64_t>("batch_size", 0), 64);
  EXPECT_DOUBLE_EQ(c.get<double>("lr", 0), 1e-3);
  EXPECT_EQ(c.get<std::string>("name", ""), "x");
  EXPECT_TRUE(c.get<bool>("flag", false));
  EXPECT_EQ(c.get<std::vector<int64_t>>("hidden", {}), (std::vector<int64_t>{1, 2}));
  Config sub = c.section("sub");
  EXPECT_EQ(sub.get<int64_t>("a", 0), 1);
  sub.finish();
  std::string msg = tessera::testing::error_of([&] { c.finish(); });
  EXPECT_NE(msg.find("unknown key 'batch_sise'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'batch_size'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("valid keys"), std::string::npos) << msg;
  Config t(parse_yaml("train: {epochs: two}"));
  Config tr = t.section("train");
  msg = tessera::testing::error_of([&] { tr.get<int64_t>("epochs", 1); });
  EXPECT_NE(msg.find("'train.epochs' must be an integer, got \"two\""), std::string::npos) << msg;
  msg = tessera::testing::error_of([] { parse_yaml("a: [1, 2\nb: 3", "cfg.yaml"); });
  EXPECT_NE(msg.find("cfg.yaml: invalid YAML at line"), std::string::npos) << msg;
  msg = tessera::testing::error_of([] { parse_yaml("a: 1\na: 2"); });
  EXPECT_NE(msg.find("'a' appears twice"), std::string::npos) << msg;
}

// Aliases repeat what they name: nine nested levels of ten are 10^9 values from
// a few hundred bytes ("billion laughs"). The expansion and the document size
// are bounded; a very long plain scalar is read without a recursive regex.
TEST(Config, AliasExpansionDocumentSizeAndLongScalarsAreBounded) {
  std::string laughs = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    std::string prev = "*a" + std::to_string(i - 1);
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + prev;
    for (int k = 1; k < 10; ++k) laughs += ", " + prev;
    laughs += "]\n";
  }
  std::string msg = tessera::testing::error_of([&] { parse_yaml(laughs, "laughs.yaml"); });
  EXPECT_NE(msg.find("laughs.yaml: the document expands to more than 1000000 values"), std::string::npos) << msg;
  // A few aliases are fine.
  EXPECT_EQ(parse_yaml("base: &b {lr: 0.5}\nfinetune: *b\n")["finetune"]["lr"], 0.5);
  msg = tessera::testing::error_of([] { parse_yaml(std::string(17u << 20, ' '), "big.yaml"); });
  EXPECT_NE(msg.find("big.yaml: 17825792 bytes; YAML documents of at most 16777216 bytes are read"), std::string::npos)
      << msg;
  const nlohmann::json j = parse_yaml("n: " + std::string(200000, '7') + "\nm: 1" + std::string(200000, '0') + ".5\n");
  EXPECT_TRUE(j["n"].is_number_float());  // too large for int64: a (infinite) float, as YAML's core schema reads it
  EXPECT_TRUE(j["m"].is_number_float());
}
