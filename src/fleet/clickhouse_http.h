// ClickHouse's HTTP interface (libcurl, loaded at run time): INSERT ... FORMAT JSONEachRow with the rows as the request body, and
// plain queries. What works on Debian 12's ClickHouse 18.16 as well as on current servers.
#pragma once
#include <memory>
#include <string>

namespace stackscope::fleet {

struct ClickHouseReply {
  int status = 0;          // HTTP status; 0 when no answer came
  std::string body;        // the answer, or ClickHouse's error text
  std::string error;       // the transport error ("" when an answer came)
  // False only when the request certainly never reached the server (connection refused, name not resolved): an
  // insert that failed otherwise may have been stored.
  bool maybe_reached = false;
  bool ok() const { return status == 200; }
  std::string describe() const;  // one line for the log
};

class ClickHouseHttp {
 public:
  // url: "http://HOST:PORT" (https:// as libcurl allows). Throws std::runtime_error when libcurl cannot be loaded.
  ClickHouseHttp(std::string url, double timeout_s);
  ~ClickHouseHttp();
  ClickHouseHttp(const ClickHouseHttp&) = delete;
  ClickHouseHttp& operator=(const ClickHouseHttp&) = delete;

  // POSTs `sql` and `body` (sent after the query text, as its data: the rows of an INSERT). `url_params`: settings
  // as URL parameters ("name=value&..."), how 18.16 takes them for an INSERT.
  ClickHouseReply post(const std::string& sql, const std::string& body = {}, const std::string& url_params = {});
  // INSERT INTO db.table FORMAT JSONEachRow, the rows one JSON object a line. skip_unknown_fields: fields the table
  // has no column for are dropped instead of failing the insert.
  ClickHouseReply insert_json_rows(const std::string& database, const std::string& table, const std::string& rows,
                                   bool skip_unknown_fields = false);

 private:
  std::string url_;
  double timeout_s_;
  void* curl_ = nullptr;  // CURL*, reused: keeps the connection alive between batches
};

// `name` quoted as a ClickHouse identifier (`db`.`table`), backquotes and backslashes escaped.
std::string clickhouse_identifier(const std::string& name);
// `text` as a ClickHouse string literal.
std::string clickhouse_string(const std::string& text);

}  // namespace stackscope::fleet
