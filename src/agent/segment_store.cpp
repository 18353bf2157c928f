#include "agent/segment_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "model/clock.h"
#include "store/recording_writer.h"

namespace stackscope::agent {

namespace fs = std::filesystem;

SegmentedRecording::SegmentedRecording(SegmentOptions options) : opt_(std::move(options)) {
  std::error_code ec;
  fs::create_directories(opt_.dir, ec);
  if (ec) throw std::runtime_error("cannot create " + opt_.dir + ": " + ec.message());
  std::unique_lock lk(mu_);
  open_segment();
}

SegmentedRecording::~SegmentedRecording() {
  try {
    close();
  } catch (...) {
  }
}

void SegmentedRecording::open_segment() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  std::string path;
  int fd = -1;
  // Created here, owner-only (a recording holds command lines and call names); the writer fills the empty file.
  // A name taken (the node's samplers restarted by a reload within the same second) moves on to the next number.
  for (int attempt = 0; fd < 0 && attempt < 1000; ++attempt) {
    path = fmt::format("{}/{}-{}-{}.sdb", opt_.dir, opt_.prefix, stamp, seq_++);
    fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) throw std::runtime_error(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  ::close(fd);
  if (writer_) {
    const auto s = writer_->stats();
    events_done_ += s.events;
    samples_done_ += s.samples;
    writer_->close();
  }
  writer_ = std::make_unique<RecordingWriter>(path);
  for (const auto& [k, v] : opt_.meta) writer_->set_meta(k, v);
  writer_->set_meta("segment", std::to_string(seq_ - 1));
  if (!paths_.empty()) writer_->set_meta("previous_segment", fs::path(paths_.back()).filename().string());
  paths_.push_back(path);
  for (size_t i = 0; i < series_.size(); ++i) writer_ids_[i] = writer_->add_series(series_[i]);
  segment_start_ns_ = monotonic_ns();
}

SeriesId SegmentedRecording::add_series(const SeriesInfo& info) {
  std::unique_lock lk(mu_);
  auto key = std::make_tuple(info.host, info.name, info.device);
  if (auto it = by_key_.find(key); it != by_key_.end()) return it->second;
  series_.push_back(info);
  const auto id = static_cast<SeriesId>(series_.size());
  series_.back().id = id;
  writer_ids_.push_back(closed_ ? 0 : writer_->add_series(info));
  by_key_.emplace(std::move(key), id);
  return id;
}

void SegmentedRecording::append_event(Event&& e) {
  std::shared_lock lk(mu_);
  if (!closed_) writer_->append_event(std::move(e));
}

void SegmentedRecording::append_samples(std::span<const Sample> samples) {
  std::vector<Sample> mapped(samples.begin(), samples.end());
  std::shared_lock lk(mu_);
  if (closed_) return;
  for (Sample& s : mapped) {
    if (s.series == 0 || s.series > writer_ids_.size()) continue;
    s.series = writer_ids_[s.series - 1];
  }
  writer_->append_samples(mapped);
}

void SegmentedRecording::add_drops(std::string_view source, uint64_t n) {
  std::shared_lock lk(mu_);
  if (!closed_) writer_->add_drops(source, n);
}

void SegmentedRecording::add_note(std::string_view source, std::string_view text) {
  std::shared_lock lk(mu_);
  if (!closed_) writer_->add_note(source, text);
}

bool SegmentedRecording::maybe_rotate(int64_t now_ns) {
  {
    std::shared_lock lk(mu_);
    if (closed_) return false;
    const bool old = now_ns - segment_start_ns_ >= opt_.max_duration_ns;
    struct stat st{}, wal{};
    uint64_t bytes = 0;
    if (::stat(paths_.back().c_str(), &st) == 0) bytes += static_cast<uint64_t>(st.st_size);
    if (::stat((paths_.back() + "-wal").c_str(), &wal) == 0) bytes += static_cast<uint64_t>(wal.st_size);
    if (!old && bytes < opt_.max_bytes) return false;
  }
  std::unique_lock lk(mu_);
  if (closed_) return false;
  open_segment();
  return true;
}

std::string SegmentedRecording::close() {
  std::unique_lock lk(mu_);
  if (!closed_ && writer_) {
    const auto s = writer_->stats();
    events_done_ += s.events;
    samples_done_ += s.samples;
    writer_->close();
  }
  closed_ = true;
  return paths_.empty() ? std::string() : paths_.back();
}

std::string SegmentedRecording::current_path() const {
  std::shared_lock lk(mu_);
  return paths_.empty() ? std::string() : paths_.back();
}

std::vector<std::string> SegmentedRecording::paths() const {
  std::shared_lock lk(mu_);
  return paths_;
}

bool SegmentedRecording::failed() const {
  std::shared_lock lk(mu_);
  return writer_ && writer_->failed();
}

uint64_t SegmentedRecording::events() const {
  std::shared_lock lk(mu_);
  return events_done_ + (writer_ && !closed_ ? writer_->stats().events : 0);
}

uint64_t SegmentedRecording::samples() const {
  std::shared_lock lk(mu_);
  return samples_done_ + (writer_ && !closed_ ? writer_->stats().samples : 0);
}

RetentionResult apply_retention(const std::string& root, uint64_t max_bytes, int64_t max_age_ns,
                                const std::set<std::string>& open, const std::set<std::string>& keep_dirs) {
  struct Segment {
    std::string path;
    int64_t mtime_ns = 0;
    uint64_t bytes = 0;
  };
  std::vector<Segment> segments;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->path().extension() != ".sdb") continue;
    struct stat st{};
    const std::string path = it->path().string();
    if (::stat(path.c_str(), &st) != 0) continue;
    Segment s{path, static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
              static_cast<uint64_t>(st.st_size)};
    for (const char* side : {"-wal", "-shm"})
      if (struct stat ss{}; ::stat((path + side).c_str(), &ss) == 0) s.bytes += static_cast<uint64_t>(ss.st_size);
    segments.push_back(std::move(s));
  }
  std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) { return a.mtime_ns < b.mtime_ns; });
  RetentionResult r;
  uint64_t total = 0;
  for (auto& s : segments) total += s.bytes;
  const int64_t now = realtime_ns();
  std::set<std::string> touched_dirs;
  for (auto& s : segments) {
    const bool too_old = now - s.mtime_ns > max_age_ns;
    if (open.count(s.path) || (!too_old && total <= max_bytes)) {
      ++r.segments;
      r.bytes += s.bytes;
      continue;
    }
    for (const char* side : {"", "-wal", "-shm"}) ::unlink((s.path + side).c_str());
    total -= s.bytes;
    ++r.deleted;
    r.deleted_bytes += s.bytes;
    touched_dirs.insert(fs::path(s.path).parent_path().string());
  }
  // A job's directory with no segment left (its logs only) goes too, unless the job is still traced.
  for (const auto& dir : touched_dirs) {
    if (keep_dirs.count(dir) || dir == root) continue;
    bool has_segment = false;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      if (it->path().extension() == ".sdb") has_segment = true;
    if (!has_segment) fs::remove_all(dir, ec);
  }
  return r;
}

}  // namespace stackscope::agent
