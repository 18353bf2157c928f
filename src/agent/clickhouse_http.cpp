#include "agent/clickhouse_http.h"

#include <curl/curl.h>

#include <mutex>

#include <fmt/format.h>

namespace stackscope::agent {

namespace {

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
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  while (!url_.empty() && url_.back() == '/') url_.pop_back();
  curl_ = curl_easy_init();
}

ClickHouseHttp::~ClickHouseHttp() {
  if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

ClickHouseReply ClickHouseHttp::post(const std::string& sql, const std::string& body) {
  ClickHouseReply reply;
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
    char* q = curl_easy_escape(c, sql.data(), static_cast<int>(sql.size()));
    url += std::string("?query=") + q;
    curl_free(q);
  }
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, data.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(data.size()));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min(timeout_s_, 5.0) * 1000));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s_ * 1000));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply.body);
  // No "Expect: 100-continue" round trip before each batch.
  curl_slist* headers = curl_slist_append(nullptr, "Expect:");
  headers = curl_slist_append(headers, "Content-Type: text/plain; charset=utf-8");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    reply.error = fmt::format("{}: {}", url_, curl_easy_strerror(rc));
    reply.maybe_reached = rc != CURLE_COULDNT_CONNECT && rc != CURLE_COULDNT_RESOLVE_HOST &&
                          rc != CURLE_COULDNT_RESOLVE_PROXY && rc != CURLE_URL_MALFORMAT &&
                          rc != CURLE_UNSUPPORTED_PROTOCOL;
    return reply;
  }
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  reply.status = static_cast<int>(status);
  reply.maybe_reached = true;
  return reply;
}

ClickHouseReply ClickHouseHttp::insert_json_rows(const std::string& database, const std::string& table,
                                                 const std::string& rows) {
  return post(fmt::format("INSERT INTO {}.{} FORMAT JSONEachRow", clickhouse_identifier(database),
                          clickhouse_identifier(table)),
              rows);
}

}  // namespace stackscope::agent
