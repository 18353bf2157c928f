#include "agent/http_endpoint.h"

#include <civetweb.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

namespace stackscope::agent {

namespace {
// civetweb's global state is set up once per process.
void init_library() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

using Digest = std::array<unsigned char, 32>;
Digest sha256(std::string_view s) {
  Digest d{};
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), d.data(), &n, EVP_sha256(), nullptr);
  return d;
}

void send(mg_connection* conn, int status, const char* content_type, const std::string& body, bool head,
          const char* extra_headers = "") {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n%s\r\n", status,
            mg_get_response_code_text(conn, status), content_type, body.size(), extra_headers);
  if (!head) mg_write(conn, body.data(), body.size());
}
}  // namespace

std::string read_http_token(const std::string& path) {
  const std::string key = "http.token_file";
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    throw std::invalid_argument(fmt::format("{}: cannot read '{}': {}", key, path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw std::invalid_argument(fmt::format("{}: '{}' is not a regular file", key, path));
  // The token opens /metrics and /api/incidents (job and pod names): a file others can read gives it away.
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    throw std::invalid_argument(fmt::format(
        "{}: '{}' may be read or written by others than its owner, or is not owned by the agent's user (uid {}): "
        "chown {} '{}' && chmod 600 '{}' (in Kubernetes: the Secret volume's defaultMode 0400)",
        key, path, ::geteuid(), ::geteuid(), path, path));
  std::ifstream in(path, std::ios::binary);
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) throw std::invalid_argument(fmt::format("{}: '{}' is empty; write the token into it", key, path));
  if (token.size() > 4096) throw std::invalid_argument(fmt::format("{}: '{}' is over 4096 bytes", key, path));
  for (unsigned char c : token)
    if (c <= 0x20 || c >= 0x7f)
      throw std::invalid_argument(fmt::format(
          "{}: '{}' holds a space, a control character or a non-ASCII byte; a bearer token is one word of "
          "letters, digits and -._~+/= (e.g. `openssl rand -hex 32`)",
          key, path));
  return token;
}

HttpEndpoint::HttpEndpoint(const std::string& listen, std::map<std::string, Handler> routes, std::string token,
                           std::set<std::string> open_routes)
    : listen_(listen), routes_(std::move(routes)), open_routes_(std::move(open_routes)), token_(std::move(token)) {
  init_library();
  std::string ports = listen;
  const std::string workers = std::to_string(kWorkers), timeout = std::to_string(kRequestTimeoutMs);
  // civetweb binds port 0 to a free port and reports it through mg_get_server_ports. Connections wait in its queue
  // (and the listen backlog) while every worker is busy; a kept-alive connection idle for half a second is closed,
  // so that it does not hold a worker between a scraper's requests.
  const char* options[] = {"listening_ports", ports.c_str(), "num_threads", workers.c_str(),
                           "request_timeout_ms", timeout.c_str(), "keep_alive_timeout_ms", "500",
                           "connection_queue", "256", "listen_backlog", "256",
                           "enable_keep_alive", "yes", "max_request_size", "16384", nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };  // errors come back as the result
  mg_init_data init{&callbacks, this, options};
  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error{&error_code, error_text, sizeof error_text};
  ctx_ = mg_start2(&init, &error);
  if (!ctx_)
    throw std::runtime_error("cannot listen on " + listen + " (in use, or not an address of this host)" +
                             (error_text[0] ? std::string(": ") + error_text : std::string()));
  // Every path comes here: unknown ones get a plain 404, and request bodies are refused on any of them.
  mg_set_request_handler(ctx_, "/", &HttpEndpoint::dispatch, this);
  mg_server_port p[4]{};
  if (int n = mg_get_server_ports(ctx_, 4, p); n > 0) port_ = p[0].port;
}

HttpEndpoint::~HttpEndpoint() {
  if (ctx_) mg_stop(ctx_);
}

void HttpEndpoint::set_token(std::string token) {
  std::lock_guard lk(token_mu_);
  token_ = std::move(token);
}

bool HttpEndpoint::authorized(const char* header) const {
  std::string token;
  {
    std::lock_guard lk(token_mu_);
    if (token_.empty()) return true;
    token = token_;
  }
  if (!header || ::strncasecmp(header, "Bearer ", 7) != 0) return false;
  std::string_view given(header + 7);
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  while (!given.empty() && given.back() == ' ') given.remove_suffix(1);
  // Compared as digests in constant time: neither the length nor a common prefix shows in the answer's timing.
  const Digest a = sha256(given), b = sha256(token);
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

int HttpEndpoint::dispatch(mg_connection* conn, void* self_ptr) {
  auto* self = static_cast<HttpEndpoint*>(self_ptr);
  const mg_request_info* req = mg_get_request_info(conn);
  const bool head = std::strcmp(req->request_method, "HEAD") == 0;
  if (std::strcmp(req->request_method, "GET") != 0 && !head) {
    mg_disable_connection_keep_alive(conn);
    send(conn, 405, "text/plain; charset=utf-8", "only GET and HEAD\n", false, "Allow: GET, HEAD\r\nConnection: close\r\n");
    return 405;
  }
  // No route takes a body: one announced (a length, or chunks) is refused at once and the connection closed, rather
  // than a worker waiting for bytes that may never come.
  if (req->content_length > 0 || (req->content_length < 0 && mg_get_header(conn, "Transfer-Encoding"))) {
    mg_disable_connection_keep_alive(conn);
    send(conn, 413, "text/plain; charset=utf-8", "no request body is accepted\n", head, "Connection: close\r\n");
    return 413;
  }
  const std::string path = req->local_uri ? req->local_uri : "";
  auto it = self->routes_.find(path);
  if (it == self->routes_.end()) {
    send(conn, 404, "text/plain; charset=utf-8", "not found\n", head);
    return 404;
  }
  if (!self->open_routes_.count(path) && !self->authorized(mg_get_header(conn, "Authorization"))) {
    send(conn, 401, "text/plain; charset=utf-8",
         "this agent needs \"Authorization: Bearer <token>\" (the content of its http.token_file)\n", head,
         "WWW-Authenticate: Bearer realm=\"stackscope\"\r\n");
    return 401;
  }
  HttpResponse r;
  try {
    r = it->second();
  } catch (const std::exception& e) {
    r = {500, "text/plain; charset=utf-8", std::string("error: ") + e.what() + "\n"};
  }
  send(conn, r.status, r.content_type.c_str(), r.body, head);
  return r.status;
}

}  // namespace stackscope::agent
