// The agent's HTTP interface (civetweb, Debian's libcivetweb): a fixed set of GET routes, each answered by a
// function. Loopback by default (the listen address is the operator's choice). Idle and slow clients cannot take it
// down: many workers, each connection given a short deadline for its request; request bodies are refused. With a
// bearer token every route but the open ones (/healthz, for the kubelet's probes) needs it.
#pragma once
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

struct mg_context;
struct mg_connection;

namespace stackscope::agent {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpEndpoint {
 public:
  using Handler = std::function<HttpResponse()>;
  // Worker threads and the time a client has to send its request line and headers (and to take each part of the
  // answer): a client that connects and sends nothing, or trickles its headers, holds one worker that long at most.
  static constexpr int kWorkers = 32;
  static constexpr int kRequestTimeoutMs = 2000;

  // Listens on `listen` ("HOST:PORT"; port 0 takes any free one). Throws std::runtime_error when it cannot.
  // `token`: when not empty, every route but those in `open_routes` answers 401 without "Authorization: Bearer
  // <token>".
  HttpEndpoint(const std::string& listen, std::map<std::string, Handler> routes, std::string token = {},
               std::set<std::string> open_routes = {});
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;
  int port() const { return port_; }
  const std::string& listen() const { return listen_; }
  void set_token(std::string token);  // a new token (rotated on reload), in effect for the next request

 private:
  static int dispatch(mg_connection* conn, void* self);
  bool authorized(const char* header) const;
  mg_context* ctx_ = nullptr;
  std::string listen_;
  std::map<std::string, Handler> routes_;
  std::set<std::string> open_routes_;
  mutable std::mutex token_mu_;
  std::string token_;
  int port_ = 0;
};

// The bearer token in `path` (its content, without the trailing newline): a regular file that only its owner, the
// agent's user, may read or write. Throws std::invalid_argument saying what is wrong and how to fix it.
std::string read_http_token(const std::string& path);

}  // namespace stackscope::agent
