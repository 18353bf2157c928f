#include "agent/clickhouse_spool.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "model/clock.h"

namespace stackscope::agent {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMagic = "SPOOL1";
constexpr size_t kMaxHeader = 512;

uint32_t crc_of(const std::string& data) {
  return static_cast<uint32_t>(
      ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
}

struct Header {
  uint64_t seq = 0;
  std::string batch_id;
  std::string table;
  uint32_t rows = 0;
  uint64_t payload_bytes = 0;
  uint32_t crc = 0;
  int64_t created_unix_ns = 0;
  size_t header_bytes = 0;
};

// Parses the header line at the start of `text`; false when it is not a complete, well-formed header.
bool parse_header(const std::string& text, Header& h) {
  const auto eol = text.find('\n');
  if (eol == std::string::npos) return false;
  std::istringstream in(text.substr(0, eol));
  std::string magic;
  if (!(in >> magic >> h.seq >> h.batch_id >> h.table >> h.rows >> h.payload_bytes >> h.crc >> h.created_unix_ns))
    return false;
  if (magic != kMagic) return false;
  // Both end up in a query and in JSON: plain names only.
  constexpr const char* kNameChars = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_";
  if (h.batch_id.find_first_not_of(kNameChars) != std::string::npos || h.table.find_first_not_of(kNameChars) != std::string::npos)
    return false;
  h.header_bytes = eol + 1;
  return true;
}

std::string read_at(int fd, uint64_t offset, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, out.data() + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw std::runtime_error(std::strerror(errno));
    done += static_cast<size_t>(w);
  }
}

std::string random_id() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", v);
}

}  // namespace

ClickHouseSpool::ClickHouseSpool(std::string dir, uint64_t max_bytes, uint64_t file_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes),
      // Several files always, so that the limit drops the oldest batches and never the one being written.
      file_bytes_(std::max<uint64_t>(4096, std::min(file_bytes, max_bytes / 4))) {
  load();
}

ClickHouseSpool::~ClickHouseSpool() {
  if (write_fd_ >= 0) ::close(write_fd_);
}

std::string ClickHouseSpool::file_path(uint64_t first_seq) const { return fmt::format("{}/{:020}.spool", dir_, first_seq); }

uint64_t ClickHouseSpool::pending_rows() const {
  uint64_t n = 0;
  for (const auto& e : index_) n += e.rows;
  return n;
}

void ClickHouseSpool::load() {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_))
    throw std::runtime_error(fmt::format("spool directory {}: {}", dir_, ec ? ec.message() : "not a directory"));
  if (::access(dir_.c_str(), W_OK) != 0)
    throw std::runtime_error(fmt::format("spool directory {}: {}", dir_, std::strerror(errno)));
  session_id_ = random_id();
  uint64_t acked = 0;
  {
    std::ifstream in(dir_ + "/acked");
    in >> acked;
  }
  std::vector<uint64_t> firsts;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != 26 || name.substr(20) != ".spool") continue;
    if (name.substr(0, 20).find_first_not_of("0123456789") != std::string::npos) continue;
    firsts.push_back(std::stoull(name.substr(0, 20)));
  }
  std::sort(firsts.begin(), firsts.end());
  next_seq_ = acked + 1;
  for (uint64_t first : firsts) scan_file(first, acked);
}

// Indexes the unacknowledged records of one file; cuts a torn or corrupt tail; deletes a file with nothing left.
void ClickHouseSpool::scan_file(uint64_t first_seq, uint64_t acked) {
  const std::string path = file_path(first_seq);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st{};
  ::fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t offset = 0;
  size_t pending = 0;
  while (offset < size) {
    Header h;
    if (!parse_header(read_at(fd, offset, kMaxHeader), h)) break;
    const uint64_t length = h.header_bytes + h.payload_bytes;
    if (offset + length > size) break;
    if (crc_of(read_at(fd, offset + h.header_bytes, h.payload_bytes)) != h.crc) break;
    next_seq_ = std::max(next_seq_, h.seq + 1);
    if (h.seq > acked) {
      index_.push_back({h.seq, first_seq, offset, length, h.rows, h.created_unix_ns});
      ++pending;
    }
    offset += length;
  }
  if (offset < size && ::ftruncate(fd, static_cast<off_t>(offset)) != 0) offset = size;
  ::close(fd);
  if (pending == 0) {
    fs::remove(path);
    return;
  }
  files_.emplace_back(first_seq, offset);
  bytes_ += offset;
}

uint64_t ClickHouseSpool::append(const std::string& table, uint32_t rows, const std::string& payload) {
  if (table.empty() || table.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") != std::string::npos)
    throw std::invalid_argument("spool: bad table name '" + table + "'");
  // A file is written only by the spool that made it: after a restart the next batch starts a new one.
  if (write_fd_ >= 0 && !files_.empty() && files_.back().second >= file_bytes_) {
    ::close(write_fd_);
    write_fd_ = -1;
  }
  if (write_fd_ < 0) {
    const std::string path = file_path(next_seq_);
    write_fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (write_fd_ < 0) throw std::runtime_error(fmt::format("spool {}: {}", path, std::strerror(errno)));
    files_.emplace_back(next_seq_, 0);
  }
  const uint64_t seq = next_seq_;
  const int64_t created = realtime_ns();
  const std::string header = fmt::format("{} {} {}-{} {} {} {} {} {}\n", kMagic, seq, session_id_, seq, table, rows,
                                         payload.size(), crc_of(payload), created);
  const uint64_t offset = files_.back().second;
  try {
    write_all(write_fd_, header);
    write_all(write_fd_, payload);
    if (::fdatasync(write_fd_) != 0) throw std::runtime_error(std::strerror(errno));
  } catch (const std::exception& e) {
    // Not in the spool: cut what was written, so the file stays a sequence of whole records.
    if (::ftruncate(write_fd_, static_cast<off_t>(offset)) != 0) {
      ::close(write_fd_);
      write_fd_ = -1;
    }
    throw std::runtime_error(fmt::format("spool {}: {}", dir_, e.what()));
  }
  const uint64_t length = header.size() + payload.size();
  index_.push_back({seq, files_.back().first, offset, length, rows, created});
  files_.back().second += length;
  bytes_ += length;
  ++next_seq_;
  enforce_limit();
  return seq;
}

void ClickHouseSpool::enforce_limit() {
  while (bytes_ > max_bytes_ && files_.size() > 1) {
    const uint64_t first = files_.front().first;
    while (!index_.empty() && index_.front().file_first_seq == first) {
      ++dropped_batches_;
      dropped_rows_ += index_.front().rows;
      index_.pop_front();
    }
    remove_file(first);
  }
}

std::optional<SpooledBatch> ClickHouseSpool::front() {
  while (!index_.empty()) {
    const Entry e = index_.front();
    const int fd = ::open(file_path(e.file_first_seq).c_str(), O_RDONLY | O_CLOEXEC);
    std::string record = fd >= 0 ? read_at(fd, e.offset, e.length) : std::string();
    if (fd >= 0) ::close(fd);
    Header h;
    if (record.size() == e.length && parse_header(record, h) && h.seq == e.seq &&
        h.header_bytes + h.payload_bytes == e.length) {
      SpooledBatch b;
      b.payload = record.substr(h.header_bytes);
      if (crc_of(b.payload) == h.crc) {
        b.seq = h.seq;
        b.batch_id = h.batch_id;
        b.table = h.table;
        b.rows = h.rows;
        b.created_unix_ns = h.created_unix_ns;
        return b;
      }
    }
    // Unreadable (the file was damaged or removed under us): lost, counted, and the next one is tried.
    ++dropped_batches_;
    dropped_rows_ += e.rows;
    pop_front();
  }
  return std::nullopt;
}

void ClickHouseSpool::pop_front() {
  if (index_.empty()) return;
  const Entry e = index_.front();
  index_.pop_front();
  write_acked(e.seq);
  const bool file_done = index_.empty() || index_.front().file_first_seq != e.file_first_seq;
  if (!file_done) return;
  if (!files_.empty() && files_.back().first == e.file_first_seq && write_fd_ >= 0) {
    ::close(write_fd_);
    write_fd_ = -1;
  }
  remove_file(e.file_first_seq);
}

void ClickHouseSpool::write_acked(uint64_t seq) {
  // Not synced: after a crash an older value means batches sent again, which the tables' keys absorb.
  const std::string path = dir_ + "/acked", tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << seq << "\n";
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
}

void ClickHouseSpool::remove_file(uint64_t first_seq) {
  auto it = std::find_if(files_.begin(), files_.end(), [&](const auto& f) { return f.first == first_seq; });
  if (it == files_.end()) return;
  if (std::next(it) == files_.end() && write_fd_ >= 0) {
    ::close(write_fd_);
    write_fd_ = -1;
  }
  bytes_ -= std::min(bytes_, it->second);
  files_.erase(it);
  std::error_code ec;
  fs::remove(file_path(first_seq), ec);
}

}  // namespace stackscope::agent
