#include "fleet/clickhouse_query.h"

#include <stdexcept>

#include <fmt/format.h>

namespace stackscope::fleet {

// ClickHouse's TabSeparated escapes (\t \n \\ ...) undone.
std::string unescape_tsv(std::string_view field) {
  std::string out;
  out.reserve(field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '\\' || i + 1 == field.size()) {
      out += field[i];
      continue;
    }
    const char c = field[++i];
    switch (c) {
      case 't': out += '\t'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case '0': out += '\0'; break;
      default: out += c;
    }
  }
  return out;
}

ClickHouseSource parse_clickhouse_source(const std::string& text) {
  constexpr std::string_view kScheme = "clickhouse://";
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("--source '{}': {} (expected clickhouse://HOST[:PORT]/DB)", text, why));
  };
  if (!std::string_view(text).starts_with(kScheme)) throw bad("not a clickhouse:// URL");
  const std::string rest = text.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string::npos || slash + 1 == rest.size()) throw bad("no database after the host");
  std::string host = rest.substr(0, slash), port = "8123";
  ClickHouseSource source;
  source.database = rest.substr(slash + 1);
  if (source.database.find_first_of("/?#") != std::string::npos) throw bad("the database name holds '/', '?' or '#'");
  // "[v6addr]:port" or "name:port"
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos && (host.front() != '[' || host[colon - 1] == ']')) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  unsigned p = 0;
  if (host.empty()) throw bad("no host");
  if (!parse_number(port, p) || p == 0 || p > 65535) throw bad("bad port '" + port + "'");
  source.url = fmt::format("http://{}:{}", host, p);
  return source;
}

ClickHouseReply query_clickhouse(const ClickHouseSource& source, const std::string& sql, double timeout_s) {
  ClickHouseHttp http(source.url, timeout_s);
  ClickHouseReply reply = http.post(sql);
  if (reply.status == 0) {  // the transport's error starts with the URL
    const size_t colon = reply.error.find(": ");
    throw std::runtime_error("cannot reach ClickHouse at " + source.url + ": " +
                             (colon == std::string::npos ? reply.error : reply.error.substr(colon + 2)));
  }
  return reply;
}

std::vector<std::string_view> split_tsv_line(std::string_view line) {
  std::vector<std::string_view> fields;
  for (size_t from = 0;;) {
    const size_t tab = line.find('\t', from);
    fields.push_back(line.substr(from, tab == std::string_view::npos ? std::string_view::npos : tab - from));
    if (tab == std::string_view::npos) return fields;
    from = tab + 1;
  }
}

}  // namespace stackscope::fleet
