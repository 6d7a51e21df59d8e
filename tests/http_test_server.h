// A tiny HTTP/1.1 server on 127.0.0.1 (an ephemeral port) in a thread, for tests of HTTP clients: one connection at a
// time, GET only, every reply with Content-Length and Connection: close. The handler decides each reply; a reply can
// declare more body than it sends (a truncated transfer). Never reaches beyond the loopback interface.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mnemo::test {

struct HttpRequest {
  std::string method, target, path;            // target = path + "?" + query
  std::map<std::string, std::string> params;   // the query, percent-decoded
  std::map<std::string, std::string> headers;  // names lower-cased
};

struct HttpReply {
  int status = 200;
  std::string body;
  std::vector<std::string> headers;  // extra "Name: value" lines
  long send_bytes = -1;              // >= 0: send only this many bytes of the body (Content-Length stays full)
};

class HttpTestServer {
 public:
  using Handler = std::function<HttpReply(const HttpRequest&)>;

  explicit HttpTestServer(Handler handler) : handler_(std::move(handler)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("test server: socket() failed");
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;  // ephemeral
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 16) != 0)
      throw std::runtime_error("test server: bind/listen on 127.0.0.1 failed");
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~HttpTestServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  HttpTestServer(const HttpTestServer&) = delete;
  HttpTestServer& operator=(const HttpTestServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return count_.load(); }
  std::vector<HttpRequest> log() const {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }

 private:
  static std::string decode(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '%' && i + 2 < s.size()) {
        out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
        i += 2;
      } else {
        out.push_back(s[i] == '+' ? ' ' : s[i]);
      }
    }
    return out;
  }

  static const char* reason(int status) {
    switch (status) {
      case 200: return "OK";
      case 403: return "Forbidden";
      case 404: return "Not Found";
      case 422: return "Unprocessable Entity";
      case 429: return "Too Many Requests";
      case 500: return "Internal Server Error";
      case 503: return "Service Unavailable";
      default: return "Status";
    }
  }

  static void send_all(int fd, const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }

  void handle(int c) {
    std::string in;
    char buf[4096];
    while (in.find("\r\n\r\n") == std::string::npos) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 2000) <= 0) return;
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      in.append(buf, static_cast<size_t>(n));
    }
    HttpRequest req;
    const size_t eol = in.find("\r\n");
    const std::string line = in.substr(0, eol);
    const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    req.method = line.substr(0, sp1);
    req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const size_t q = req.target.find('?');
    req.path = req.target.substr(0, q);
    if (q != std::string::npos) {
      std::string query = req.target.substr(q + 1);
      size_t start = 0;
      while (start <= query.size()) {
        size_t amp = query.find('&', start);
        if (amp == std::string::npos) amp = query.size();
        const std::string kv = query.substr(start, amp - start);
        const size_t eq = kv.find('=');
        if (!kv.empty())
          req.params[decode(kv.substr(0, eq))] = eq == std::string::npos ? "" : decode(kv.substr(eq + 1));
        start = amp + 1;
      }
    }
    size_t pos = eol + 2;
    while (true) {
      const size_t end = in.find("\r\n", pos);
      if (end == std::string::npos || end == pos) break;
      const std::string h = in.substr(pos, end - pos);
      const size_t colon = h.find(':');
      if (colon != std::string::npos) {
        std::string name = h.substr(0, colon);
        for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        size_t v = colon + 1;
        while (v < h.size() && h[v] == ' ') ++v;
        req.headers[name] = h.substr(v);
      }
      pos = end + 2;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      log_.push_back(req);
    }
    ++count_;
    const HttpReply r = handler_(req);
    std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason(r.status) +
                      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(r.body.size()) +
                      "\r\nConnection: close\r\n";
    for (const std::string& h : r.headers) out += h + "\r\n";
    out += "\r\n";
    out += r.send_bytes >= 0 ? r.body.substr(0, static_cast<size_t>(r.send_bytes)) : r.body;
    send_all(c, out);
  }

  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      handle(c);
      ::shutdown(c, SHUT_WR);
      ::close(c);
    }
  }

  Handler handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> count_{0};
  mutable std::mutex mu_;
  std::vector<HttpRequest> log_;
  std::thread thread_;
};

}  // namespace mnemo::test
