// The KServe v2 inference messages: JSON and binary-extension requests become
// the tensors they describe; every malformed request is a 400 whose message
// names what was wrong; responses round-trip.
#include <gtest/gtest.h>

#include <cstring>

#include "tessera/serve/protocol.h"

using namespace tessera;
using namespace tessera::serve;

namespace {

// The message of the RequestError `f` throws (its status must be `status`).
std::string rejected(const std::function<void()>& f, int status = 400) {
  try {
    f();
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no RequestError";
  return "";
}

}  // namespace

TEST(ServeProtocol, JsonRequestBecomesTensors) {
  auto r = parse_infer_request(R"({
    "id": "req-7",
    "inputs": [
      {"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [[1, 2.5, -3], [4, 5, 6]]},
      {"name": "mask", "shape": [2], "datatype": "BOOL", "data": [true, false]},
      {"name": "ids", "shape": [3], "datatype": "INT64", "data": [9007199254740993, -1, 0]},
      {"name": "px", "shape": [1], "datatype": "UINT8", "data": [255]}
    ],
    "outputs": [{"name": "logits"}, {"name": "probs", "parameters": {"binary_data": true}}]
  })", std::nullopt);
  EXPECT_EQ(r.id, "req-7");
  ASSERT_EQ(r.inputs.size(), 4u);
  EXPECT_EQ(r.inputs[0].data.shape(), (Shape{2, 3}));
  EXPECT_EQ(r.inputs[0].data.to_vector<float>(), (std::vector<float>{1, 2.5f, -3, 4, 5, 6}));
  EXPECT_EQ(r.inputs[1].data.to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(r.inputs[2].data.to_vector<int64_t>(), (std::vector<int64_t>{9007199254740993, -1, 0}));
  EXPECT_EQ(r.inputs[3].data.to_vector<uint8_t>(), (std::vector<uint8_t>{255}));
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_FALSE(r.outputs[0].binary);
  EXPECT_TRUE(r.outputs[1].binary);
}

TEST(ServeProtocol, BinaryExtensionRequest) {
  std::string header = R"({"inputs": [
    {"name": "a", "shape": [2, 2], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
    {"name": "b", "shape": [1], "datatype": "INT32", "data": [7]},
    {"name": "c", "shape": [3], "datatype": "INT8", "parameters": {"binary_data_size": 3}}],
    "parameters": {"binary_data_output": true}})";
  float a[4] = {1.5f, -2, 3, 4};
  int8_t c[3] = {-1, 0, 127};
  std::string body = header + std::string(reinterpret_cast<char*>(a), 16) + std::string(reinterpret_cast<char*>(c), 3);
  auto r = parse_infer_request(body, header.size());
  EXPECT_EQ(r.inputs[0].data.to_vector<float>(), (std::vector<float>{1.5f, -2, 3, 4}));
  EXPECT_EQ(r.inputs[1].data.to_vector<int32_t>(), (std::vector<int32_t>{7}));
  EXPECT_EQ(r.inputs[2].data.to_vector<int8_t>(), (std::vector<int8_t>{-1, 0, 127}));
  EXPECT_TRUE(r.binary_outputs);
  // Sizes that do not add up.
  EXPECT_NE(rejected([&] { parse_infer_request(body.substr(0, body.size() - 1), header.size()); })
                .find("ends 1 bytes before its binary data"),
            std::string::npos);
  EXPECT_NE(rejected([&] { parse_infer_request(body + "xx", header.size()); }).find("2 bytes after the binary inputs"),
            std::string::npos);
  EXPECT_NE(rejected([&] { parse_infer_request(body, body.size() + 5); }).find("Inference-Header-Content-Length"),
            std::string::npos);
  EXPECT_NE(rejected([&] { parse_infer_request(header, std::nullopt); }).find("no Inference-Header-Content-Length"),
            std::string::npos);
}

TEST(ServeProtocol, BadRequestsNameTheProblem) {
  auto msg = [](const char* body) { return rejected([&] { parse_infer_request(body, std::nullopt); }); };
  EXPECT_NE(msg("{\"inputs\": [").find("not valid JSON"), std::string::npos);
  EXPECT_NE(msg("[1, 2]").find("JSON object"), std::string::npos);
  EXPECT_NE(msg("{}").find("has no \"inputs\""), std::string::npos);
  EXPECT_NE(msg(R"({"inputs": [{"name": "x", "shape": [2], "datatype": "FP33", "data": [1, 2]}]})")
                .find("datatype 'FP33' is not supported; use one of BOOL, UINT8"),
            std::string::npos);
  EXPECT_NE(msg(R"({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2]}]})")
                .find("\"data\" has 2 values but shape [3] needs 3"),
            std::string::npos);
  EXPECT_NE(msg(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1, 2]}]})")
                .find("more values than the shape's 1"),
            std::string::npos);
  EXPECT_NE(msg(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "UINT8", "data": [256]}]})")
                .find("256 is out of range for UINT8"),
            std::string::npos);
  EXPECT_NE(msg(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "INT32", "data": [1.5]}]})")
                .find("whole numbers"),
            std::string::npos);
  EXPECT_NE(msg(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": ["1"]}]})")
                .find("must be numbers"),
            std::string::npos);
  EXPECT_NE(msg(R"({"inputs": [{"name": "x", "shape": [-1], "datatype": "FP32", "data": []}]})")
                .find("non-negative integers"),
            std::string::npos);
  EXPECT_NE(msg(R"({"inputs": [{"name": "x", "shape": [100000, 100000], "datatype": "FP32", "data": []}]})")
                .find("the server's limit"),
            std::string::npos);
  EXPECT_NE(msg(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]},
                               {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]})")
                .find("input 'x' is given twice"),
            std::string::npos);
  EXPECT_NE(msg("{\"id\": \"\xff\", \"inputs\": []}").find("not valid JSON"), std::string::npos);  // not UTF-8
  EXPECT_NE(msg(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1e39]}]})")
                .find(" is out of range for FP32"),
            std::string::npos);
  EXPECT_NE(msg(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [9223372036854775808]}]})")
                .find("9223372036854775808 is out of range for INT64"),
            std::string::npos);
  std::string deep = "{\"inputs\": " + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_NE(msg(deep.c_str()).find("nested deeper than 32"), std::string::npos);
}

TEST(ServeProtocol, ResponsesInJsonAndBinary) {
  Tensor y = tensor(std::vector<float>{0.25f, -1.f}).reshape({1, 2});
  auto r = write_infer_response("cnn", "1", "req-7", {{"logits", y, false}});
  EXPECT_FALSE(r.json_length);
  EXPECT_EQ(r.body, R"({"id":"req-7","model_name":"cnn","model_version":"1","outputs":[{"data":[0.25,-1.0],)"
                    R"("datatype":"FP32","name":"logits","shape":[1,2]}]})");
  auto b = write_infer_response("cnn", "1", "", {{"logits", y, true}});
  ASSERT_TRUE(b.json_length);
  EXPECT_EQ(b.body.size(), *b.json_length + 8);
  float back[2];
  std::memcpy(back, b.body.data() + *b.json_length, 8);
  EXPECT_EQ(back[0], 0.25f);
  EXPECT_NE(b.body.substr(0, *b.json_length).find("\"binary_data_size\":8"), std::string::npos);
  EXPECT_EQ(error_body("unknown model 'x'"), R"({"error":"unknown model 'x'"})");
}

TEST(ServeProtocol, InternalErrorsStayOnTheServer) {
  EXPECT_EQ(client_message(Error("model 'm': input 'x' must be FP32")), "model 'm': input 'x' must be FP32");
  const InternalError bug("internal error: n > 0 failed at /src/ops/x.cpp:12 (please report this as a Tessera bug)");
  const std::string hidden = client_message(bug);
  EXPECT_EQ(hidden.find("x.cpp"), std::string::npos) << hidden;
  EXPECT_NE(hidden.find("internal error"), std::string::npos);
  // Told apart by type, not by text: TS_INTERNAL_ASSERT throws an InternalError.
  EXPECT_TRUE(is_internal(bug));
  EXPECT_FALSE(is_internal(Error("internal error in the client's words")));
  try {
    TS_INTERNAL_ASSERT(1 + 1 == 3);
  } catch (const std::exception& e) {
    EXPECT_TRUE(is_internal(e));
  }
}
