// Thin RAII over the SQLite C API: one place that turns result codes into exceptions.
#pragma once
#include <sqlite3.h>

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace stackscope::sql {

class SqliteError : public std::runtime_error {
 public:
  SqliteError(const std::string& msg, int code) : std::runtime_error(msg), code_(code) {}
  int code() const { return code_; }
  // Disk full or quota: the recorder stops cleanly instead of treating it as a bug.
  bool disk_full() const { return (code_ & 0xff) == SQLITE_FULL; }

 private:
  int code_;
};

class Stmt;

class Db {
 public:
  // immutable: read-only without locks or the -shm file (SQLite's immutable=1), for a file in a folder we may
  // not write (a read-only mount, another user's folder); any -wal beside it is not read.
  enum class Mode { create, read_write, read_only, immutable };
  Db(const std::string& path, Mode mode);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  void exec(std::string_view sql);
  Stmt prepare(std::string_view sql);
  sqlite3* raw() { return db_; }
  [[noreturn]] void fail(std::string_view what, int rc);

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

class Stmt {
 public:
  Stmt(Db& db, sqlite3_stmt* s) : db_(&db), s_(s) {}
  Stmt(Stmt&& o) noexcept : db_(o.db_), s_(o.s_) { o.s_ = nullptr; }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt& bind(int i, int64_t v);
  Stmt& bind(int i, double v);
  Stmt& bind(int i, std::string_view v);
  Stmt& bind_blob(int i, std::span<const uint8_t> v);
  // true while a row is available
  bool step();
  void run() {
    step();
    reset();
  }
  void reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  int64_t i64(int col) { return sqlite3_column_int64(s_, col); }
  double f64(int col) { return sqlite3_column_double(s_, col); }
  std::string text(int col);
  std::span<const uint8_t> blob(int col);
  bool is_null(int col) { return sqlite3_column_type(s_, col) == SQLITE_NULL; }

 private:
  Db* db_;
  sqlite3_stmt* s_;
};

}  // namespace stackscope::sql
