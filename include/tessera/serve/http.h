#pragma once
// HTTP messages as the services see them, independent of the library that
// carries them: the transport (serve/http_server.h) hands a handler a method,
// a path, headers and a body, and the handler answers through an
// HttpExchange, with a whole response or a stream of chunks (server-sent
// events), so every route is tested without sockets.
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::serve {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;
  std::map<std::string, std::string> headers;  // names lowercase
  std::string body;
  std::string remote;  // the client's address:port, for the access log
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  HttpHeaders headers;
  std::string body;
};

// One request's answer, on the connection's thread: either send() once, or
// begin_stream(), any number of write()s, and end_stream(). Each returns
// false once the client is gone (the rest of the answer is dropped).
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual bool send(HttpResponse response) = 0;
  // The status and headers of a response whose body follows in chunks.
  virtual bool begin_stream(int status, const std::string& content_type, const HttpHeaders& headers = {}) = 0;
  virtual bool write(std::string_view data) = 0;
  virtual bool end_stream() = 0;
  // Whether the client has closed its side of the connection: a handler
  // waiting for a slow answer checks it to stop work nobody will read.
  virtual bool client_gone() = 0;
};

// Compares without an early exit, so a wrong key's timing does not tell how
// much of it was right (API keys).
inline bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// A service's entry point: answers `request` through `exchange` before it
// returns (blocking the connection's thread meanwhile).
using HttpHandler = std::function<void(HttpRequest request, HttpExchange& exchange)>;

}  // namespace tessera::serve
