// A real ClickHouse server for tests (Debian's clickhouse-server, 18.16): started on loopback on a free HTTP
// port, with a configuration and data directory of its own under a temporary directory (never the system
// service's), killed with SIGKILL and started again on the same data when a test asks. Queries go through the
// curl command, not the code under test.
#pragma once
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include "test_util.h"

namespace clickhouse_test {

inline const char* server_binary() {
  for (const char* p : {"/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"})
    if (std::filesystem::exists(p)) return p;
  return nullptr;
}

// Single quotes for the shell.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class Server {
 public:
  explicit Server(const TempDir& dir) : root_(dir.file("clickhouse")), port_(free_port()) {
    std::filesystem::create_directories(root_ + "/data");
    write_file(root_ + "/config.xml",
               "<?xml version=\"1.0\"?>\n<yandex>\n"
               "  <logger><level>warning</level><log>" + root_ + "/server.log</log><errorlog>" + root_ +
               "/server.err.log</errorlog><console>0</console></logger>\n"
               "  <http_port>" + std::to_string(port_) + "</http_port>\n"
               "  <listen_host>127.0.0.1</listen_host>\n"
               "  <path>" + root_ + "/data/</path>\n  <tmp_path>" + root_ + "/data/tmp/</tmp_path>\n"
               "  <user_files_path>" + root_ + "/data/user_files/</user_files_path>\n"
               "  <format_schema_path>" + root_ + "/data/format_schemas/</format_schema_path>\n"
               "  <mark_cache_size>67108864</mark_cache_size>\n"
               "  <uncompressed_cache_size>67108864</uncompressed_cache_size>\n"
               "  <users_config>" + root_ + "/users.xml</users_config>\n"
               "  <default_profile>default</default_profile>\n  <default_database>default</default_database>\n"
               "</yandex>\n");
    write_file(root_ + "/users.xml",
               "<?xml version=\"1.0\"?>\n<yandex>\n"
               "  <profiles><default><max_memory_usage>1000000000</max_memory_usage></default></profiles>\n"
               "  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>"
               "<profile>default</profile><quota>default</quota></default></users>\n"
               "  <quotas><default></default></quotas>\n</yandex>\n");
  }
  ~Server() { kill_now(); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() const { return read_file(root_ + "/server.err.log"); }

  // Starts the server and waits (up to `timeout`) until it answers. False when it did not.
  bool start(std::chrono::seconds timeout = std::chrono::seconds(40)) {
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open((root_ + "/stdout.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      setpgid(0, 0);
      const std::string config = "--config-file=" + root_ + "/config.xml";
      execl(server_binary(), server_binary(), config.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      std::string out;
      if (run_command("curl -s --max-time 2 " + url() + "/ping", &out) == 0 && out.rfind("Ok.", 0) == 0) return true;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  // SIGKILL, as a crash or an OOM kill would end it: no shutdown of its own.
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // Runs `sql` (in `database` when given); true and the answer when ClickHouse answered 200.
  bool query(const std::string& sql, std::string* answer = nullptr, const std::string& database = {}) const {
    write_file(root_ + "/query.sql", sql);
    std::string out;
    const std::string db = database.empty() ? std::string() : "?database=" + database;
    const int rc = run_command("curl -sS --fail-with-body --max-time 30 --data-binary @" + root_ + "/query.sql " +
                                   shell_quote(url() + "/" + db),
                               &out);
    if (answer) *answer = out;
    return rc == 0;
  }
  // The first number of the answer to `sql` (a count), or -1 on an error.
  long long number(const std::string& sql) const {
    std::string out;
    if (!query(sql, &out)) return -1;
    return std::atoll(out.c_str());
  }

  // Creates `database` and runs deploy/clickhouse/schema.sql in it (comments dropped, one statement per request).
  bool create_schema(const std::string& schema_file, const std::string& database, std::string* error) const {
    if (!query("CREATE DATABASE IF NOT EXISTS " + database, error)) return false;
    const std::string sql = std::regex_replace(read_file(schema_file), std::regex("--[^\n]*"), "");
    size_t from = 0;
    for (size_t semi; (semi = sql.find(';', from)) != std::string::npos; from = semi + 1) {
      const std::string statement = sql.substr(from, semi - from);
      if (statement.find_first_not_of(" \n\t") == std::string::npos) continue;
      if (!query(statement, error, database)) return false;
    }
    return true;
  }

 private:
  std::string root_;
  int port_;
  pid_t pid_ = -1;
};

}  // namespace clickhouse_test
