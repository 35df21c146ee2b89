#pragma once
// A server under slow clients (Note [Slow clients] in serve/http_server.cpp):
// 1,000 connections from 127.0.0.2 and up that never finish their headers,
// then a normal client on 127.0.0.1, answered within a second; an address
// past its cap, refused at once; and the slow ones closed with 408 once
// their deadlines pass. Shared by the `serve` and `serve-llm` tests; the
// server must run with max_connections_per_client = 8 and header and body
// timeouts of 3 s.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace tessera::testing {

// A connection to 127.0.0.1:port from `source` (any 127.x.y.z), or -1.
inline int connect_from(const std::string& source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in src{}, dst{};
  src.sin_family = dst.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &src.sin_addr);
  dst.sin_port = htons(static_cast<uint16_t>(port));
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// What the server sends until it closes or `timeout_ms` pass.
inline std::string reply_on(int fd, int timeout_ms) {
  std::string got;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count());
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, left) <= 0) break;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

inline void send_all(int fd, const std::string& s) {
  ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
}

inline void expect_slow_clients_cost_no_thread(int port, const std::string& health_path) {
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 4096) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4096);
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  ASSERT_GE(lim.rlim_cur, 4096u) << "the test needs 4,096 open files (both ends of 1,000 connections)";
  std::vector<int> slow;
  for (int i = 0; i < 1000; ++i) {  // 8 from each of 127.0.0.2 ... 127.0.0.126
    const int fd = connect_from("127.0.0." + std::to_string(2 + i / 8), port);
    ASSERT_GE(fd, 0) << "connection " << i;
    send_all(fd, "GET " + health_path + " HTTP/1.1\r\nHost: tessera\r\n");  // the headers never end
    slow.push_back(fd);
  }
  // A body that never arrives whole.
  const int body = connect_from("127.0.0.200", port);
  ASSERT_GE(body, 0);
  send_all(body, "POST /x HTTP/1.1\r\nHost: tessera\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\"");

  const auto t0 = std::chrono::steady_clock::now();
  const int normal = connect_from("127.0.0.1", port);
  ASSERT_GE(normal, 0);
  send_all(normal, "GET " + health_path + " HTTP/1.1\r\nHost: tessera\r\nConnection: close\r\n\r\n");
  const std::string answer = reply_on(normal, 2000);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_LT(seconds, 1.0);
  ::close(normal);

  const int ninth = connect_from("127.0.0.2", port);  // its address holds 8 already
  ASSERT_GE(ninth, 0);
  const std::string refused = reply_on(ninth, 1000);
  EXPECT_EQ(refused.rfind("HTTP/1.1 429", 0), 0u) << refused;
  EXPECT_NE(refused.find("too many connections from 127.0.0.2"), std::string::npos) << refused;
  ::close(ninth);

  // Past the 3 s deadlines, the slow headers and the slow body are answered 408 and closed.
  const std::string late_header = reply_on(slow[0], 6000), late_body = reply_on(body, 6000);
  EXPECT_EQ(late_header.rfind("HTTP/1.1 408", 0), 0u) << late_header;
  EXPECT_NE(late_header.find("headers took longer than 3 s"), std::string::npos) << late_header;
  EXPECT_EQ(late_body.rfind("HTTP/1.1 408", 0), 0u) << late_body;
  EXPECT_NE(late_body.find("body took longer than 3 s"), std::string::npos) << late_body;
  for (int fd : slow) ::close(fd);
  ::close(body);
}

}  // namespace tessera::testing
