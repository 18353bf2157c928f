// Reading the fleet store (deploy/clickhouse/schema.sql) back over ClickHouse's HTTP interface: where it is
// (clickhouse://HOST[:PORT]/DB) and the pieces every reader shares (a query that throws when the server cannot be
// reached, TabSeparated answers split and unescaped).
#pragma once
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "fleet/clickhouse_http.h"

namespace stackscope::fleet {

struct ClickHouseSource {
  std::string url;       // "http://HOST:PORT"
  std::string database;
};

// "clickhouse://HOST[:PORT]/DB" (port 8123, ClickHouse's HTTP port, when left out). Throws std::invalid_argument
// naming what is wrong.
ClickHouseSource parse_clickhouse_source(const std::string& text);

// `sql`'s answer. Throws std::runtime_error when no answer came (the server unreachable); an error answer is
// returned (status != 200, ClickHouse's message in the body).
ClickHouseReply query_clickhouse(const ClickHouseSource& source, const std::string& sql, double timeout_s);

// One TabSeparated line's fields, and a field with ClickHouse's escapes (\t \n \\ ...) undone.
std::vector<std::string_view> split_tsv_line(std::string_view line);
std::string unescape_tsv(std::string_view field);

// fn(line, fields) for each non-empty line of a TabSeparated answer.
template <typename Fn>
void for_each_tsv_row(std::string_view body, Fn&& fn) {
  while (!body.empty()) {
    const size_t nl = body.find('\n');
    const std::string_view line = body.substr(0, nl);
    body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
    if (!line.empty()) fn(line, split_tsv_line(line));
  }
}

// A whole field as a number.
template <typename T>
bool parse_number(std::string_view s, T& out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace stackscope::fleet
