// The agent's HTTP interface (civetweb, Debian's libcivetweb): a fixed set of GET routes, each answered by a
// function. Loopback by default (the listen address is the operator's choice).
#pragma once
#include <functional>
#include <map>
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
  // Listens on `listen` ("HOST:PORT"; port 0 takes any free one). Throws std::runtime_error when it cannot.
  HttpEndpoint(const std::string& listen, std::map<std::string, Handler> routes);
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;
  int port() const { return port_; }

 private:
  static int dispatch(mg_connection* conn, void* self);
  mg_context* ctx_ = nullptr;
  std::map<std::string, Handler> routes_;
  int port_ = 0;
};

}  // namespace stackscope::agent
