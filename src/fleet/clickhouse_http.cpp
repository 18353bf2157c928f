#include "fleet/clickhouse_http.h"

#include <curl/curl.h>
#include <dlfcn.h>

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>

namespace stackscope::fleet {

namespace {

// libcurl, opened at run time when a ClickHouse URL is configured: the agent binary then needs no libcurl where
// nobody uses the fleet store (the GPU machines' userland, a slim image).
struct CurlApi {
  CURLcode (*global_init)(long) = nullptr;
  CURL* (*easy_init)() = nullptr;
  void (*easy_cleanup)(CURL*) = nullptr;
  void (*easy_reset)(CURL*) = nullptr;
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...) = nullptr;
  CURLcode (*easy_perform)(CURL*) = nullptr;
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...) = nullptr;
  const char* (*easy_strerror)(CURLcode) = nullptr;
  char* (*easy_escape)(CURL*, const char*, int) = nullptr;
  void (*free)(void*) = nullptr;
  curl_slist* (*slist_append)(curl_slist*, const char*) = nullptr;
  void (*slist_free_all)(curl_slist*) = nullptr;
  std::string error;  // why it could not be loaded
};

const CurlApi& curl_api() {
  static const CurlApi api = [] {
    CurlApi a;
    void* lib = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      a.error = std::string("libcurl.so.4 not found (Debian: apt-get install libcurl4): ") + ::dlerror();
      return a;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      if (!fn && a.error.empty()) a.error = std::string("libcurl.so.4 lacks ") + name;
    };
    sym(a.global_init, "curl_global_init");
    sym(a.easy_init, "curl_easy_init");
    sym(a.easy_cleanup, "curl_easy_cleanup");
    sym(a.easy_reset, "curl_easy_reset");
    sym(a.easy_setopt, "curl_easy_setopt");
    sym(a.easy_perform, "curl_easy_perform");
    sym(a.easy_getinfo, "curl_easy_getinfo");
    sym(a.easy_strerror, "curl_easy_strerror");
    sym(a.easy_escape, "curl_easy_escape");
    sym(a.free, "curl_free");
    sym(a.slist_append, "curl_slist_append");
    sym(a.slist_free_all, "curl_slist_free_all");
    if (a.error.empty()) a.global_init(CURL_GLOBAL_DEFAULT);
    return a;
  }();
  return api;
}

size_t append_body(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

std::string escaped(const std::string& text, char quote) {
  std::string out(1, quote);
  for (char c : text) {
    if (c == quote || c == '\\') out += '\\';
    out += c;
  }
  return out + quote;
}

}  // namespace

std::string clickhouse_identifier(const std::string& name) { return escaped(name, '`'); }
std::string clickhouse_string(const std::string& text) { return escaped(text, '\''); }

std::string ClickHouseReply::describe() const {
  if (status == 0) return error;
  std::string text = body.substr(0, 300);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (char& c : text)
    if (c == '\n') c = ' ';
  return fmt::format("HTTP {}: {}", status, text);
}

ClickHouseHttp::ClickHouseHttp(std::string url, double timeout_s) : url_(std::move(url)), timeout_s_(timeout_s) {
  const CurlApi& api = curl_api();
  if (!api.error.empty()) throw std::runtime_error(api.error);
  while (!url_.empty() && url_.back() == '/') url_.pop_back();
  curl_ = api.easy_init();
}

ClickHouseHttp::~ClickHouseHttp() {
  if (curl_) curl_api().easy_cleanup(static_cast<CURL*>(curl_));
}

ClickHouseReply ClickHouseHttp::post(const std::string& sql, const std::string& body, const std::string& url_params) {
  ClickHouseReply reply;
  const CurlApi& api = curl_api();
  CURL* c = static_cast<CURL*>(curl_);
  if (!c) {
    reply.error = "libcurl could not be initialised";
    return reply;
  }
  // The query in the URL when there is a body (INSERT ... FORMAT: the rows follow), else as the body: ClickHouse
  // reads the query from the URL parameter and appends the POST data to it.
  std::string url = url_ + "/";
  std::string data = body;
  if (body.empty()) {
    data = sql;
  } else {
    char* q = api.easy_escape(c, sql.data(), static_cast<int>(sql.size()));
    url += std::string("?query=") + q;
    api.free(q);
  }
  if (!url_params.empty()) url += (url.back() == '/' ? "?" : "&") + url_params;
  api.easy_reset(c);
  api.easy_setopt(c, CURLOPT_URL, url.c_str());
  api.easy_setopt(c, CURLOPT_POST, 1L);
  api.easy_setopt(c, CURLOPT_POSTFIELDS, data.data());
  api.easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(data.size()));
  api.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  api.easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min(timeout_s_, 5.0) * 1000));
  api.easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s_ * 1000));
  api.easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
  api.easy_setopt(c, CURLOPT_WRITEDATA, &reply.body);
  // No "Expect: 100-continue" round trip before each batch.
  curl_slist* headers = api.slist_append(nullptr, "Expect:");
  headers = api.slist_append(headers, "Content-Type: text/plain; charset=utf-8");
  api.easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  const CURLcode rc = api.easy_perform(c);
  api.slist_free_all(headers);
  if (rc != CURLE_OK) {
    reply.error = fmt::format("{}: {}", url_, api.easy_strerror(rc));
    reply.maybe_reached = rc != CURLE_COULDNT_CONNECT && rc != CURLE_COULDNT_RESOLVE_HOST &&
                          rc != CURLE_COULDNT_RESOLVE_PROXY && rc != CURLE_URL_MALFORMAT &&
                          rc != CURLE_UNSUPPORTED_PROTOCOL;
    return reply;
  }
  long status = 0;
  api.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  reply.status = static_cast<int>(status);
  reply.maybe_reached = true;
  return reply;
}

ClickHouseReply ClickHouseHttp::insert_json_rows(const std::string& database, const std::string& table,
                                                 const std::string& rows, bool skip_unknown_fields) {
  return post(fmt::format("INSERT INTO {}.{} FORMAT JSONEachRow", clickhouse_identifier(database),
                          clickhouse_identifier(table)),
              rows, skip_unknown_fields ? "input_format_skip_unknown_fields=1" : "");
}

}  // namespace stackscope::fleet
