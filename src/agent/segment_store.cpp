#include "agent/segment_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "model/clock.h"
#include "store/recording_reader.h"
#include "store/recording_writer.h"

namespace stackscope::agent {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestName = "agent.manifest";

std::string escape_line(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string unescape_line(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      ++i;
      out += s[i] == 'n' ? '\n' : s[i];
    } else {
      out += s[i];
    }
  }
  return out;
}

// A segment of an agent from before the manifest: its metadata says the agent wrote it (the "config" every agent
// segment carries has "agent": true).
bool written_by_agent(const fs::path& p) {
  try {
    RecordingReader r(p.string());
    return r.meta_or("config").find("\"agent\":true") != std::string::npos;
  } catch (const std::exception&) {
    return false;
  }
}

void remove_segment_files(const std::string& path) {
  for (const char* side : {"", "-wal", "-shm", "-reserve"}) ::unlink((path + side).c_str());
}

}  // namespace

std::string StoreManifest::normal(const std::string& dir) {
  std::string p = fs::path(dir).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

StoreManifest::StoreManifest(const std::string& root) : root_(normal(root)) {
  const std::string path = root_ + "/" + kManifestName;
  std::lock_guard lk(mu_);
  if (struct stat st{}; ::stat(path.c_str(), &st) == 0) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    for (std::string line; std::getline(in, line);) {
      if (line.size() < 3 || line[1] != ' ') continue;  // the header comment
      (line[0] == 'd' ? dirs_ : files_).insert(unescape_line(line.substr(2)));
    }
    return;
  }
  // No manifest yet: the agent's own segments at its own paths are adopted, so that retention goes on deleting
  // them; anything else stays unlisted.
  std::error_code ec;
  for (auto it = fs::directory_iterator(root_ + "/node", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_regular_file(ec) && !it->is_symlink(ec) && name.rfind("node-", 0) == 0 && name.ends_with(".sdb") &&
        written_by_agent(it->path())) {
      files_.insert("node/" + name);
      dirs_.insert("node");
      ++adopted_;
    }
  }
  for (auto job = fs::directory_iterator(root_ + "/jobs", ec); !ec && job != fs::directory_iterator();
       job.increment(ec)) {
    if (job->is_symlink(ec) || !job->is_directory(ec)) continue;
    const std::string dir = "jobs/" + job->path().filename().string();
    bool any = false;
    std::error_code ec2;
    for (auto it = fs::directory_iterator(job->path(), ec2); !ec2 && it != fs::directory_iterator();
         it.increment(ec2)) {
      const std::string name = it->path().filename().string();
      if (it->is_regular_file(ec2) && !it->is_symlink(ec2) && name.rfind("segment-", 0) == 0 &&
          name.ends_with(".sdb") && written_by_agent(it->path())) {
        files_.insert(dir + "/" + name);
        any = true;
        ++adopted_;
      }
    }
    if (!any) continue;
    dirs_.insert(dir);
    dirs_.insert("jobs");
    if (fs::is_regular_file(job->path() / "incidents.jsonl", ec2)) files_.insert(dir + "/incidents.jsonl");
  }
  dirty_ = true;  // written even when empty: the agent's files from now on are listed as they are made
  save_locked();
}

std::string StoreManifest::rel(const std::string& path) const {
  const std::string p = normal(path);
  if (p.size() <= root_.size() + 1 || p.compare(0, root_.size(), root_) != 0 || p[root_.size()] != '/') return {};
  return p.substr(root_.size() + 1);
}

void StoreManifest::create_dirs(const std::string& dir) {
  const std::string r = rel(dir);
  // The data_dir itself is never listed (nor removed), nor a folder outside it.
  std::error_code ec;
  fs::create_directories(r.empty() ? dir : root_, ec);
  if (ec) throw std::runtime_error("cannot create " + (r.empty() ? dir : root_) + ": " + ec.message());
  if (r.empty()) return;
  std::lock_guard lk(mu_);
  std::string so_far;
  for (const auto& part : fs::path(r)) {
    so_far += (so_far.empty() ? "" : "/") + part.string();
    const std::string full = root_ + "/" + so_far;
    if (::mkdir(full.c_str(), 0700) == 0) {
      dirs_.insert(so_far);
      dirty_ = true;
      continue;
    }
    const int err = errno;
    struct stat st{};
    if (err == EEXIST && ::stat(full.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    throw std::runtime_error(fmt::format("cannot create {}: {}", full, std::strerror(err)));
  }
  save_locked();
}

void StoreManifest::add_file(const std::string& path) {
  const std::string r = rel(path);
  if (r.empty()) return;
  std::lock_guard lk(mu_);
  if (files_.insert(r).second) dirty_ = true;
  save_locked();
}

void StoreManifest::forget(const std::string& path) {
  const std::string r = rel(path);
  std::lock_guard lk(mu_);
  if (files_.erase(r) + dirs_.erase(r) > 0) dirty_ = true;
}

bool StoreManifest::has_file(const std::string& path) const {
  std::lock_guard lk(mu_);
  return files_.count(rel(path)) > 0;
}

bool StoreManifest::has_dir(const std::string& path) const {
  std::lock_guard lk(mu_);
  return dirs_.count(rel(path)) > 0;
}

std::vector<std::string> StoreManifest::files() const {
  std::lock_guard lk(mu_);
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(root_ + "/" + f);
  return out;
}

bool StoreManifest::save() {
  std::lock_guard lk(mu_);
  return save_locked();
}

bool StoreManifest::save_locked() {
  if (!dirty_) return true;
  std::string text =
      "# stackscope agent: the files (f) and folders (d) it made under this data_dir, which retention may delete;\n"
      "# nothing else here is touched. Paths relative to the data_dir.\n";
  for (const auto& d : dirs_) text += "d " + escape_line(d) + "\n";
  for (const auto& f : files_) text += "f " + escape_line(f) + "\n";
  const std::string path = root_ + "/" + kManifestName, tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = true;
  for (size_t done = 0; ok && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  // The list is replaced whole or not at all: a crash or a full disk leaves the previous one.
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  dirty_ = false;
  return true;
}

SegmentedRecording::SegmentedRecording(SegmentOptions options) : opt_(std::move(options)) {
  if (opt_.manifest) {
    opt_.manifest->create_dirs(opt_.dir);
  } else {
    std::error_code ec;
    fs::create_directories(opt_.dir, ec);
    if (ec) throw std::runtime_error("cannot create " + opt_.dir + ": " + ec.message());
  }
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
  std::unique_ptr<RecordingWriter> next;
  try {
    next = std::make_unique<RecordingWriter>(path);
  } catch (const std::exception& e) {  // a full disk: no empty file left behind
    remove_segment_files(path);
    throw std::runtime_error(fmt::format("cannot write {}: {}", path, e.what()));
  }
  retire_writer();
  writer_ = std::move(next);
  for (const auto& [k, v] : opt_.meta) writer_->set_meta(k, v);
  writer_->set_meta("segment", std::to_string(seq_ - 1));
  if (!paths_.empty()) writer_->set_meta("previous_segment", fs::path(paths_.back()).filename().string());
  // What no segment took since the previous one shows in this one's drops.
  {
    std::lock_guard dl(unnoted_mu_);
    if (unnoted_.events) writer_->add_drops("store.unwritable", unnoted_.events);
    if (unnoted_.samples) writer_->add_drops("store.unwritable.samples", unnoted_.samples);
    for (const auto& [source, n] : unnoted_drops_) writer_->add_drops(source, n);
    unnoted_ = {};
    unnoted_drops_.clear();
  }
  paths_.push_back(path);
  if (opt_.manifest) opt_.manifest->add_file(path);
  for (size_t i = 0; i < series_.size(); ++i) writer_ids_[i] = writer_->add_series(series_[i]);
  segment_start_ns_ = monotonic_ns();
  retry_open_ = false;
}

void SegmentedRecording::retire_writer() {
  if (!writer_) return;
  writer_->close();
  const auto s = writer_->stats();
  events_done_ += s.events;
  samples_done_ += s.samples;
  // What the writer took but did not commit (the batch of a failed write, a backlog beyond its limit) is lost.
  const uint64_t offered_e = offered_events_.exchange(0), offered_s = offered_samples_.exchange(0);
  if (offered_e > s.flushed_events) lost_events_ += offered_e - s.flushed_events;
  if (offered_s > s.flushed_samples) lost_samples_ += offered_s - s.flushed_samples;
  writer_.reset();
}

SeriesId SegmentedRecording::add_series(const SeriesInfo& info) {
  std::unique_lock lk(mu_);
  auto key = std::make_tuple(info.host, info.name, info.device);
  if (auto it = by_key_.find(key); it != by_key_.end()) return it->second;
  series_.push_back(info);
  const auto id = static_cast<SeriesId>(series_.size());
  series_.back().id = id;
  writer_ids_.push_back(closed_ || !writer_ ? 0 : writer_->add_series(info));
  by_key_.emplace(std::move(key), id);
  return id;
}

void SegmentedRecording::append_event(Event&& e) {
  std::shared_lock lk(mu_);
  if (closed_) return;
  if (!writer_ || writer_->failed()) {
    ++lost_events_;
    std::lock_guard dl(unnoted_mu_);
    ++unnoted_.events;
    return;
  }
  ++offered_events_;
  writer_->append_event(std::move(e));
}

void SegmentedRecording::append_samples(std::span<const Sample> samples) {
  std::vector<Sample> mapped(samples.begin(), samples.end());
  std::shared_lock lk(mu_);
  if (closed_) return;
  if (!writer_ || writer_->failed()) {
    lost_samples_ += samples.size();
    std::lock_guard dl(unnoted_mu_);
    unnoted_.samples += samples.size();
    return;
  }
  for (Sample& s : mapped) {
    if (s.series == 0 || s.series > writer_ids_.size()) continue;
    s.series = writer_ids_[s.series - 1];
  }
  offered_samples_ += mapped.size();
  writer_->append_samples(mapped);
}

void SegmentedRecording::add_drops(std::string_view source, uint64_t n) {
  std::shared_lock lk(mu_);
  if (closed_) return;
  if (writer_) {
    writer_->add_drops(source, n);
    return;
  }
  std::lock_guard dl(unnoted_mu_);
  unnoted_drops_[std::string(source)] += n;
}

void SegmentedRecording::add_note(std::string_view source, std::string_view text) {
  std::shared_lock lk(mu_);
  if (!closed_ && writer_) writer_->add_note(source, text);
}

bool SegmentedRecording::maybe_rotate(int64_t now_ns) {
  {
    std::shared_lock lk(mu_);
    if (closed_ || !writer_ || retry_open_) return false;
    const bool old = now_ns - segment_start_ns_ >= opt_.max_duration_ns;
    struct stat st{}, wal{};
    uint64_t bytes = 0;
    if (::stat(paths_.back().c_str(), &st) == 0) bytes += static_cast<uint64_t>(st.st_size);
    if (::stat((paths_.back() + "-wal").c_str(), &wal) == 0) bytes += static_cast<uint64_t>(wal.st_size);
    if (!old && bytes < opt_.max_bytes) return false;
  }
  std::unique_lock lk(mu_);
  if (closed_ || !writer_) return false;
  try {
    open_segment();
  } catch (const std::exception& e) {  // the current segment goes on; check() tries again
    retry_open_ = true;
    error_ = e.what();
    return false;
  }
  return true;
}

std::string SegmentedRecording::check(const std::string& not_writable) {
  std::unique_lock lk(mu_);
  if (closed_) return {};
  // A failed write is not followed by a new segment in the same call: the disk it filled has only the room the
  // closed segment's reserve left, and the caller says when there is room again.
  bool failed_now = false;
  if (writer_ && writer_->failed()) {
    error_ = fmt::format("a write to {} failed: {}", paths_.back(), writer_->error());
    retire_writer();
    failed_now = true;
  }
  if (!not_writable.empty()) {
    retire_writer();
    if (!failed_now) error_ = not_writable;
  } else if (!failed_now && (!writer_ || retry_open_)) {
    try {
      open_segment();
      error_.clear();
    } catch (const std::exception& e) {
      retry_open_ = writer_ != nullptr;
      error_ = e.what();
    }
  }
  const bool writing = writer_ != nullptr;
  const uint64_t le = lost_events_.load(), ls = lost_samples_.load();
  std::string line;
  if (!writing && !stopping_) {
    stopping_ = true;
    lost_at_stop_ = {le, ls};
    line = fmt::format("not writing ({}); events and samples are counted as lost until a segment can be written",
                       error_);
  } else if (writing && stopping_) {
    stopping_ = false;
    line = fmt::format("writing again, into {} ({} events and {} samples lost meanwhile)", paths_.back(),
                       le - lost_at_stop_.events, ls - lost_at_stop_.samples);
  }
  return line;
}

std::string SegmentedRecording::close() {
  std::unique_lock lk(mu_);
  if (!closed_) retire_writer();
  closed_ = true;
  return paths_.empty() ? std::string() : paths_.back();
}

std::string SegmentedRecording::current_path() const {
  std::shared_lock lk(mu_);
  return paths_.empty() || !writer_ ? std::string() : paths_.back();
}

std::vector<std::string> SegmentedRecording::paths() const {
  std::shared_lock lk(mu_);
  return paths_;
}

bool SegmentedRecording::failed() const {
  std::shared_lock lk(mu_);
  return !closed_ && (!writer_ || writer_->failed());
}

std::string SegmentedRecording::error() const {
  std::shared_lock lk(mu_);
  if (closed_) return {};
  if (writer_ && writer_->failed()) return fmt::format("a write to {} failed: {}", paths_.back(), writer_->error());
  return writer_ ? std::string() : error_;
}

StoreLoss SegmentedRecording::lost() const { return {lost_events_.load(), lost_samples_.load()}; }

uint64_t SegmentedRecording::events() const {
  std::shared_lock lk(mu_);
  return events_done_ + (writer_ && !closed_ ? writer_->stats().events : 0);
}

uint64_t SegmentedRecording::samples() const {
  std::shared_lock lk(mu_);
  return samples_done_ + (writer_ && !closed_ ? writer_->stats().samples : 0);
}

uint64_t free_bytes(const std::string& path, uint64_t* fs_bytes) {
  struct statvfs st{};
  if (::statvfs(path.c_str(), &st) != 0) return UINT64_MAX;
  if (fs_bytes) *fs_bytes = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

RetentionResult apply_retention(StoreManifest& manifest, uint64_t max_bytes, int64_t max_age_ns,
                                uint64_t min_free_bytes, const std::set<std::string>& open_given,
                                const std::set<std::string>& keep_dirs_given) {
  std::set<std::string> open, keep_dirs;  // as the manifest writes paths
  for (const auto& p : open_given)
    if (!p.empty()) open.insert(StoreManifest::normal(p));
  for (const auto& d : keep_dirs_given) keep_dirs.insert(StoreManifest::normal(d));
  struct Segment {
    std::string path;
    int64_t mtime_ns = 0;
    uint64_t bytes = 0;
  };
  std::vector<Segment> segments;
  for (const auto& path : manifest.files()) {
    if (!path.ends_with(".sdb")) continue;
    struct stat st{};
    // Gone, or no longer the agent's regular file (replaced by a link or a folder): forgotten, never followed.
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      manifest.forget(path);
      continue;
    }
    Segment s{path, static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
              static_cast<uint64_t>(st.st_size)};
    for (const char* side : {"-wal", "-shm"})
      if (struct stat ss{}; ::lstat((path + side).c_str(), &ss) == 0 && S_ISREG(ss.st_mode))
        s.bytes += static_cast<uint64_t>(ss.st_size);
    segments.push_back(std::move(s));
  }
  std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) { return a.mtime_ns < b.mtime_ns; });
  RetentionResult r;
  uint64_t total = 0;
  for (auto& s : segments) total += s.bytes;
  const int64_t now = realtime_ns();
  r.free_bytes = free_bytes(manifest.root());
  std::set<std::string> touched_dirs;
  for (auto& s : segments) {
    const bool too_old = now - s.mtime_ns > max_age_ns;
    const bool low_disk = r.free_bytes != UINT64_MAX && r.free_bytes < min_free_bytes;
    if (open.count(s.path) || (!too_old && total <= max_bytes && !low_disk)) {
      ++r.segments;
      r.bytes += s.bytes;
      continue;
    }
    remove_segment_files(s.path);
    manifest.forget(s.path);
    total -= s.bytes;
    ++r.deleted;
    r.deleted_bytes += s.bytes;
    if (r.free_bytes != UINT64_MAX) r.free_bytes = free_bytes(manifest.root());
    touched_dirs.insert(fs::path(s.path).parent_path().string());
  }
  // A folder the agent made for a job, with none of its segments left: the agent's other files in it go (the
  // job's incident log), then the folder if nothing else is in it. Never a folder of a job still traced.
  const auto files = manifest.files();
  for (const auto& dir : touched_dirs) {
    if (keep_dirs.count(dir) || !manifest.has_dir(dir)) continue;
    std::vector<std::string> mine;
    bool has_segment = false;
    for (const auto& f : files) {
      if (fs::path(f).parent_path().string() != dir || !manifest.has_file(f)) continue;
      if (f.ends_with(".sdb")) has_segment = true;
      mine.push_back(f);
    }
    if (has_segment) continue;
    for (const auto& f : mine) {
      ::unlink(f.c_str());
      manifest.forget(f);
    }
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) manifest.forget(dir);
  }
  manifest.save();
  return r;
}

}  // namespace stackscope::agent
