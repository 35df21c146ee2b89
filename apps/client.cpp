// `tessera client` (client.h): reads a served model's signature, sends one
// infer request (inputs from .npy files, or random values of the signature
// with every dynamic dimension 1), and prints the outputs and the latency.
#include "client.h"
#include "latency.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/io/npy.h"
#include "tessera/ops/ops.h"
#include "tessera/serve/protocol.h"

using namespace tessera;
using nlohmann::json;

namespace {

// "http://host:port" (no TLS: the server speaks plain HTTP on a trusted network or behind a proxy).
std::pair<std::string, int> parse_url(const std::string& url) {
  static const std::regex re(R"(^http://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\])(?::([0-9]{1,5}))?/?$)");
  std::smatch m;
  TS_CHECK(std::regex_match(url, m, re), "client: --url must look like http://HOST:PORT (such as http://127.0.0.1:8000), "
           "got '", url, "'");
  const int port = m[2].matched ? std::stoi(m[2].str()) : 80;
  TS_CHECK(port > 0 && port <= 65535, "client: port ", port, " is not in 1..65535");
  std::string host = m[1].str();
  if (host.front() == '[') host = host.substr(1, host.size() - 2);
  return {host, port};
}

// A server's answer, or an Error carrying its status and message.
json call(httplib::Client& c, const httplib::Headers& headers, const std::string& method, const std::string& path,
          const std::string& body = "") {
  auto res = method == "GET" ? c.Get(path, headers) : c.Post(path, headers, body, "application/json");
  TS_CHECK(res, "client: no answer from the server (", httplib::to_string(res.error()), "); is `tessera serve` running?");
  json j = json::parse(res->body, nullptr, false);
  if (res->status != 200) {
    const std::string why = !j.is_discarded() && j.contains("error") ? j["error"].get<std::string>() : res->body;
    TS_ERROR("client: ", method, " ", path, " -> ", res->status, ": ", why);
  }
  TS_CHECK(!j.is_discarded(), "client: the server's answer to ", path, " is not JSON");
  return j;
}

json tensor_json(const std::string& name, const Tensor& t) {
  return {{"name", name}, {"datatype", serve::kserve_name(t.dtype())},
          {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())}, {"data", serve::json_data(t)}};
}

}  // namespace

int cmd_client(const ClientFlags& f) {
  auto [host, port] = parse_url(f.url);
  httplib::Client c(host, port);
  c.set_connection_timeout(5);
  c.set_read_timeout(60);
  c.set_keep_alive(true);
  httplib::Headers headers;
  if (!f.api_key_file.empty()) {
    std::ifstream in(f.api_key_file);
    TS_CHECK(in, "client: cannot read the API key file '", f.api_key_file, "'");
    std::string key;
    std::getline(in, key);
    while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
    headers.emplace("Authorization", "Bearer " + key);
  }
  const std::string base = "/v2/models/" + f.model + (f.version.empty() ? "" : "/versions/" + f.version);
  const json meta = call(c, headers, "GET", base);
  const json& ports = meta["inputs"];
  TS_CHECK(f.inputs.empty() || f.inputs.size() == ports.size(), "client: model '", f.model, "' takes ", ports.size(),
           " input(s), got ", f.inputs.size(), " --input file(s)");

  json inputs = json::array();
  for (size_t i = 0; i < ports.size(); ++i) {
    const std::string name = ports[i]["name"], dtype = ports[i]["datatype"];
    Tensor t;
    if (!f.inputs.empty()) {
      t = io::load_npy(f.inputs[i]);
    } else {
      Shape s;
      for (int64_t d : ports[i]["shape"].get<std::vector<int64_t>>()) s.push_back(d < 0 ? 1 : d);
      auto dt = serve::dtype_from_kserve(dtype);
      TS_CHECK(dt, "client: the model's input '", name, "' has datatype ", dtype, ", which the client cannot make");
      t = is_floating(*dt) ? ops::randn(s).to(*dt) : zeros(s, *dt);
      std::printf("input %s: random %s %s (pass --input FILE.npy for real data)\n", name.c_str(), dtype.c_str(),
                  ports[i]["shape"].dump().c_str());
    }
    inputs.push_back(tensor_json(name, t));
  }
  json request = {{"id", "tessera-client"}, {"inputs", inputs}};
  const std::string body = request.dump();

  std::vector<double> ms;
  json answer;
  for (int i = 0; i < std::max(1, f.repeat); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    answer = call(c, headers, "POST", base + "/infer", body);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  for (const json& o : answer["outputs"]) {
    std::printf("output %s: %s %s", o["name"].get<std::string>().c_str(), o["datatype"].get<std::string>().c_str(),
                o["shape"].dump().c_str());
    const json& data = o["data"];
    const size_t show = std::min<size_t>(data.size(), 10);
    std::printf(" [");
    for (size_t k = 0; k < show; ++k) std::printf("%s%s", k ? ", " : "", data[k].dump().c_str());
    std::printf("%s]", data.size() > show ? ", ..." : "");
    // A classifier's [1, K] scores: the class it picked.
    if (o["shape"].size() == 2 && o["shape"][0] == 1 && data.size() > 1) {
      size_t best = 0;
      for (size_t k = 1; k < data.size(); ++k)
        if (data[k].get<double>() > data[best].get<double>()) best = k;
      std::printf("  argmax %zu", best);
    }
    std::printf("\n");
  }
  if (ms.size() == 1) std::printf("model %s version %s: %.2f ms\n", f.model.c_str(),
                                  answer.value("model_version", "?").c_str(), ms[0]);
  else std::printf("model %s version %s: %s\n", f.model.c_str(), answer.value("model_version", "?").c_str(),
                   cli::latency_str(cli::latency_of(ms)).c_str());
  return 0;
}
