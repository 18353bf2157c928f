#include "store/sqlite_db.h"

#include <fmt/format.h>

namespace stackscope::sql {

namespace {
// A path as a file: URI (RFC 3986: '%', '?', '#' and non-printing bytes escaped).
std::string file_uri(const std::string& path, const char* query) {
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c <= ' ' || c >= 0x7f) uri += fmt::format("%{:02X}", c);
    else uri += static_cast<char>(c);
  }
  return uri + "?" + query;
}
}  // namespace

Db::Db(const std::string& path, Mode mode) : path_(path) {
  int flags = mode == Mode::create      ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
              : mode == Mode::read_write ? SQLITE_OPEN_READWRITE
              : mode == Mode::read_only  ? SQLITE_OPEN_READONLY
                                         : SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
  const std::string name = mode == Mode::immutable ? file_uri(path, "immutable=1") : path;
  int rc = sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw SqliteError(path + ": " + msg, rc);
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, 5000);
}

Db::~Db() { sqlite3_close(db_); }

void Db::fail(std::string_view what, int rc) {
  throw SqliteError(path_ + ": " + std::string(what) + ": " + sqlite3_errmsg(db_), rc);
}

void Db::exec(std::string_view sql) {
  std::string s(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw SqliteError(path_ + ": " + msg, rc);
  }
}

Stmt Db::prepare(std::string_view sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &s, nullptr);
  if (rc != SQLITE_OK) fail("prepare '" + std::string(sql.substr(0, 60)) + "'", rc);
  return Stmt(*this, s);
}

Stmt& Stmt::bind(int i, int64_t v) {
  if (int rc = sqlite3_bind_int64(s_, i, v); rc != SQLITE_OK) db_->fail("bind", rc);
  return *this;
}
Stmt& Stmt::bind(int i, double v) {
  if (int rc = sqlite3_bind_double(s_, i, v); rc != SQLITE_OK) db_->fail("bind", rc);
  return *this;
}
Stmt& Stmt::bind(int i, std::string_view v) {
  if (int rc = sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT); rc != SQLITE_OK)
    db_->fail("bind", rc);
  return *this;
}
Stmt& Stmt::bind_blob(int i, std::span<const uint8_t> v) {
  if (int rc = sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC); rc != SQLITE_OK)
    db_->fail("bind", rc);
  return *this;
}

bool Stmt::step() {
  int rc = sqlite3_step(s_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  sqlite3_reset(s_);
  db_->fail("step", rc);
}

std::string Stmt::text(int col) {
  auto* p = sqlite3_column_text(s_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(s_, col)) : std::string();
}

std::span<const uint8_t> Stmt::blob(int col) {
  auto* p = static_cast<const uint8_t*>(sqlite3_column_blob(s_, col));
  return {p, static_cast<size_t>(sqlite3_column_bytes(s_, col))};
}

}  // namespace stackscope::sql
