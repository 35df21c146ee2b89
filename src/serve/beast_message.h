#pragma once
// Boost.Beast's HTTP messages and the inference service's own, one way and
// the other: used by the server (serve/http_server.cpp) and by the transport
// it was compared with (bench/serve_beast.cpp).
#include <utility>  // before Beast: Boost 1.74's Asio uses std::exchange without including it

#include <boost/beast/http.hpp>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

#include "tessera/serve/service.h"

namespace tessera::serve {

// The method, the path without its query, the headers with lowercase names, and the body (moved).
inline HttpRequest from_beast(boost::beast::http::request<boost::beast::http::string_body>&& req, std::string remote) {
  HttpRequest r;
  r.method = std::string(req.method_string());
  const std::string_view target(req.target().data(), req.target().size());
  r.path = std::string(target.substr(0, target.find('?')));
  for (const auto& field : req) {
    std::string key(field.name_string());
    std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
    r.headers[key] = std::string(field.value());
  }
  r.body = std::move(req.body());
  r.remote = std::move(remote);
  return r;
}

inline boost::beast::http::response<boost::beast::http::string_body> to_beast(HttpResponse&& out, bool keep_alive,
                                                                              unsigned version) {
  namespace http = boost::beast::http;
  http::response<http::string_body> res{static_cast<http::status>(out.status), version};
  res.set(http::field::server, "tessera");
  res.set(http::field::content_type, out.content_type);
  for (const auto& [k, v] : out.headers) res.set(k, v);
  res.keep_alive(keep_alive);
  res.body() = std::move(out.body);
  res.prepare_payload();
  return res;
}

}  // namespace tessera::serve
