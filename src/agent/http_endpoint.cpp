#include "agent/http_endpoint.h"

#include <civetweb.h>

#include <cstring>
#include <mutex>
#include <stdexcept>

namespace stackscope::agent {

namespace {
// civetweb's global state is set up once per process.
void init_library() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}
}  // namespace

HttpEndpoint::HttpEndpoint(const std::string& listen, std::map<std::string, Handler> routes)
    : routes_(std::move(routes)) {
  init_library();
  std::string ports = listen;
  // civetweb binds port 0 to a free port and reports it through mg_get_server_ports.
  const char* options[] = {"listening_ports", ports.c_str(), "num_threads", "2", "request_timeout_ms", "10000",
                           "enable_keep_alive", "yes", nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };  // errors come back as the result
  ctx_ = mg_start(&callbacks, this, options);
  if (!ctx_) throw std::runtime_error("cannot listen on " + listen + " (in use, or not an address of this host)");
  for (const auto& route : routes_) mg_set_request_handler(ctx_, route.first.c_str(), &HttpEndpoint::dispatch, this);
  mg_server_port p[4]{};
  if (int n = mg_get_server_ports(ctx_, 4, p); n > 0) port_ = p[0].port;
}

HttpEndpoint::~HttpEndpoint() {
  if (ctx_) mg_stop(ctx_);
}

int HttpEndpoint::dispatch(mg_connection* conn, void* self_ptr) {
  auto* self = static_cast<HttpEndpoint*>(self_ptr);
  const mg_request_info* req = mg_get_request_info(conn);
  if (std::strcmp(req->request_method, "GET") != 0 && std::strcmp(req->request_method, "HEAD") != 0) {
    mg_send_http_error(conn, 405, "only GET\n");
    return 405;
  }
  auto it = self->routes_.find(req->local_uri ? req->local_uri : "");
  if (it == self->routes_.end()) {
    mg_send_http_error(conn, 404, "not found\n");
    return 404;
  }
  HttpResponse r;
  try {
    r = it->second();
  } catch (const std::exception& e) {
    r = {500, "text/plain; charset=utf-8", std::string("error: ") + e.what() + "\n"};
  }
  mg_printf(conn, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n\r\n",
            r.status, mg_get_response_code_text(conn, r.status), r.content_type.c_str(), r.body.size());
  if (std::strcmp(req->request_method, "HEAD") != 0) mg_write(conn, r.body.data(), r.body.size());
  return r.status;
}

}  // namespace stackscope::agent
