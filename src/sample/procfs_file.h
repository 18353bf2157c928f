// Reading kernel text files cheaply and parsing them safely.
// Why a kept-open fd and pread: the sampler re-reads the same ~20 files every 10-100 ms; open/close per read
// would double the syscalls and allocate each time. procfs and sysfs regenerate the text on a read at offset 0.
#pragma once
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope::procfs {

class ProcFile {
 public:
  ProcFile() = default;
  ~ProcFile();
  ProcFile(const ProcFile&) = delete;
  ProcFile& operator=(const ProcFile&) = delete;
  ProcFile(ProcFile&& o) noexcept;
  ProcFile& operator=(ProcFile&& o) noexcept;

  // Opens read-only; false (and error()) when the file cannot be opened. `one_record`: the kernel produces the
  // file as a single record (single_open seq_files such as /proc/stat and /proc/meminfo, sysfs and cgroup
  // attributes), so a read shorter than the buffer is the whole file and the EOF read can be skipped.
  bool open(const std::string& path, bool one_record = false);
  bool is_open() const { return fd_ >= 0; }
  void close();
  // The whole current text, valid until the next read(); nullopt on a read error (error() says why).
  // Files larger than `max_bytes` are cut there (a corrupt or runaway file must not eat memory).
  std::optional<std::string_view> read(size_t max_bytes = 16u << 20);
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  bool one_record_ = false;
  std::string path_;
  std::string error_;
  std::vector<char> buf_;
};

// Whole-file read for one-off reads (names, labels) at setup time, never in the sampling loop.
std::optional<std::string> read_small_file(const std::string& path, size_t max_bytes = 1u << 20);

// What a parser made of its input: how many values it produced, how many fields it skipped, and the
// first problem it saw (empty when none). Parsers never throw and never emit a value they could not read.
struct ParseReport {
  size_t values = 0;
  size_t skipped = 0;
  std::string error;  // first problem only: "line 3: field 'idle' is not a number"
  bool ok() const { return error.empty(); }
  void fail(std::string why) {
    ++skipped;
    if (error.empty()) error = std::move(why);
  }
};

// Strict unsigned parse of the whole token: no sign, no trailing garbage, no overflow.
inline std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}
inline std::optional<int64_t> parse_i64(std::string_view s) {
  int64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}
// Finite decimal such as "0.31"; nullopt for nan/inf/garbage.
std::optional<double> parse_f64(std::string_view s);

// Splits text into lines without allocating.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : rest_(text) {}
  bool next(std::string_view& line) {
    if (rest_.empty()) return false;
    size_t nl = rest_.find('\n');
    line = rest_.substr(0, nl);
    rest_.remove_prefix(nl == std::string_view::npos ? rest_.size() : nl + 1);
    ++number_;
    return true;
  }
  size_t number() const { return number_; }  // 1-based number of the line just read

 private:
  std::string_view rest_;
  size_t number_ = 0;
};

// Splits a line into whitespace-separated tokens without allocating.
class Tokens {
 public:
  explicit Tokens(std::string_view line) : rest_(line) {}
  bool next(std::string_view& tok) {
    size_t b = rest_.find_first_not_of(" \t\r");
    if (b == std::string_view::npos) {
      rest_ = {};
      return false;
    }
    rest_.remove_prefix(b);
    size_t e = rest_.find_first_of(" \t\r");
    tok = rest_.substr(0, e);
    rest_.remove_prefix(e == std::string_view::npos ? rest_.size() : e);
    return true;
  }
  std::string_view rest() const;  // remaining text with leading blanks removed

 private:
  std::string_view rest_;
};

std::string_view trim(std::string_view s);

// "0-3,8,10-11" (sysfs cpu lists) -> {0,1,2,3,8,10,11}; nullopt on malformed input or more than 65536 CPUs.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);

// A series-name-safe version of kernel text: spaces and odd characters become '_'.
std::string sanitize_name(std::string_view s);

}  // namespace stackscope::procfs
