#include "sample/procfs_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

namespace stackscope::procfs {

ProcFile::~ProcFile() { close(); }

ProcFile::ProcFile(ProcFile&& o) noexcept
    : fd_(o.fd_), one_record_(o.one_record_), path_(std::move(o.path_)), error_(std::move(o.error_)), buf_(std::move(o.buf_)) {
  o.fd_ = -1;
}

ProcFile& ProcFile::operator=(ProcFile&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    one_record_ = o.one_record_;
    o.fd_ = -1;
    path_ = std::move(o.path_);
    error_ = std::move(o.error_);
    buf_ = std::move(o.buf_);
  }
  return *this;
}

bool ProcFile::open(const std::string& path, bool one_record) {
  close();
  path_ = path;
  one_record_ = one_record;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    error_ = path + ": " + std::strerror(errno);
    return false;
  }
  error_.clear();
  if (buf_.empty()) buf_.resize(4096);
  return true;
}

void ProcFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::optional<std::string_view> ProcFile::read(size_t max_bytes) {
  if (fd_ < 0) {
    if (error_.empty()) error_ = path_ + ": not open";
    return std::nullopt;
  }
  // seq_file-backed files may return less than asked before their end, so read until a read returns 0;
  // the buffer grows to the file's size once and is reused from then on.
  size_t total = 0;
  for (;;) {
    if (total == buf_.size()) {
      if (buf_.size() >= max_bytes) break;
      buf_.resize(std::min(buf_.size() * 2, max_bytes));
    }
    ssize_t n = ::pread(fd_, buf_.data() + total, buf_.size() - total, static_cast<off_t>(total));
    if (n < 0) {
      if (errno == EINTR) continue;
      error_ = path_ + ": " + std::strerror(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    total += static_cast<size_t>(n);
    if (one_record_ && total < buf_.size()) break;
  }
  return std::string_view(buf_.data(), total);
}

std::optional<std::string> read_small_file(const std::string& path, size_t max_bytes) {
  ProcFile f;
  if (!f.open(path)) return std::nullopt;
  auto text = f.read(max_bytes);
  if (!text) return std::nullopt;
  return std::string(*text);
}

std::optional<double> parse_f64(std::string_view s) {
  double v = 0;
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string_view Tokens::rest() const { return trim(rest_); }

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  text = trim(text);
  if (text.empty()) return cpus;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view part = text.substr(0, comma);
    text.remove_prefix(comma == std::string_view::npos ? text.size() : comma + 1);
    size_t dash = part.find('-');
    auto lo = parse_u64(part.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : parse_u64(part.substr(dash + 1));
    if (!lo || !hi || *hi < *lo || *hi >= 65536) return std::nullopt;
    for (uint64_t c = *lo; c <= *hi; ++c) cpus.push_back(static_cast<int>(c));
    if (cpus.size() > 65536) return std::nullopt;
  }
  return cpus;
}

std::string sanitize_name(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : trim(s)) {
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                c == '.' || c == ':';
    out.push_back(keep ? c : '_');
  }
  return out;
}

}  // namespace stackscope::procfs
