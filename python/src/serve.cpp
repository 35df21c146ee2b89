// The inference server (KServe v2 over HTTP, dynamic batching) started from
// Python. The server runs saved graphs (a Tessera graph directory or an ONNX
// file) on its own threads; no Python code runs per request.
#include <memory>

#include "bindings.h"
#include "tessera/serve/http_server.h"
#include "tessera/serve/service.h"

namespace tessera::python {

namespace {

struct Server {
  std::unique_ptr<serve::InferenceService> service;
  std::unique_ptr<serve::HttpServer> http;
};

}  // namespace

void bind_serve(py::module_& m) {
  py::module_ s = m.def_submodule("_serve", "The inference server");
  py::class_<Server>(s, "Server")
      .def(py::init([](const std::string& host, int port, const std::string& api_key, int threads) {
             auto srv = std::make_unique<Server>();
             serve::ServiceOptions o;
             o.api_key = api_key;
             srv->service = std::make_unique<serve::InferenceService>(o);
             serve::HttpServerOptions h;
             h.host = host;
             h.port = port;
             h.threads = threads;
             srv->http = std::make_unique<serve::HttpServer>(*srv->service, h);
             return srv;
           }),
           py::arg("host") = "127.0.0.1", py::arg("port") = 8000, py::arg("api_key") = "", py::arg("threads") = 64)
      .def_property_readonly("port", [](const Server& srv) { return srv.http ? srv.http->port() : 0; })
      .def("load", [](Server& srv, const std::string& name, const std::string& path, int64_t version,
                      int64_t max_batch_size, int64_t max_queue_delay_us, int instances, int warmup_runs) {
        serve::ModelConfig c;
        c.max_batch_size = max_batch_size;
        c.max_queue_delay_us = max_queue_delay_us;
        c.instances = instances;
        c.warmup_runs = warmup_runs;
        py::gil_scoped_release nogil;
        srv.service->load(name, version, path, c);
      }, py::arg("name"), py::arg("path"), py::arg("version") = 1, py::arg("max_batch_size") = 64,
         py::arg("max_queue_delay_us") = 500, py::arg("instances") = 1, py::arg("warmup_runs") = 3)
      .def("unload", [](Server& srv, const std::string& name, int64_t version) { srv.service->unload(name, version); },
           py::arg("name"), py::arg("version") = 1)
      .def("stop", [](Server& srv) {
        py::gil_scoped_release nogil;
        if (srv.http) srv.http->stop();
        if (srv.service) srv.service->drain();
        srv.http.reset();
        srv.service.reset();
      }, "Stops taking connections, answers the requests in flight, and releases the models.");
}

}  // namespace tessera::python
