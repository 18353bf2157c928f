#include "store/recording_writer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/clock.h"
#include "store/block_codec.h"
#include "store/recording_schema.h"
#include "store/sqlite_db.h"
#include "model/process.h"

namespace stackscope {

namespace {
constexpr off_t kReserveBytes = 128 << 10;  // a few 16 KiB pages and their WAL frames
}  // namespace

struct RecordingWriter::Pending {
  std::vector<Event> events;
  std::vector<Sample> samples;
  std::vector<SeriesInfo> new_series;
  std::vector<std::pair<std::string, std::string>> meta;
  std::vector<std::tuple<int64_t, std::string, std::string>> notes;
  bool drops_changed = false;
};

struct RecordingWriter::Impl {
  explicit Impl(const std::string& path) : db(path, sql::Db::Mode::create) {}
  sql::Db db;
  codec::StringInterner strings;  // used by the writer thread only
  uint64_t layer_counts[static_cast<int>(Layer::kCount)] = {};
};

RecordingWriter::RecordingWriter(const std::string& path, RecordingWriterOptions options)
    : path_(path), opt_(options), pending_(std::make_unique<Pending>()) {
  // A previous file of that name is replaced, its WAL and shared-memory files too. An empty regular file is kept:
  // it is the one store/output_file.h just created for this recording, with its mode (0600) and lock.
  struct stat st{};
  if (!(::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)) ::unlink(path.c_str());
  // Private by default (0600): a recording holds command lines, names and timings of someone's job.
  if (int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600); fd >= 0) ::close(fd);
  ::unlink((path + "-wal").c_str());
  ::unlink((path + "-shm").c_str());
  impl_ = std::make_unique<Impl>(path);
  // A little disk kept aside (PATH-reserve, removed at close): when the disk fills, it is freed so that the final
  // drop counts and the cause still reach the recording (`info` showed "dropped 0" without it).
  if (int fd = ::open((path + "-reserve").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
      fd >= 0) {
    if (::posix_fallocate(fd, 0, kReserveBytes) != 0) ::unlink((path + "-reserve").c_str());
    ::close(fd);
  }
  create_schema();
  thread_ = std::thread([this] {
    name_this_thread("ss-writer");
    run();
  });
}

RecordingWriter::~RecordingWriter() {
  try {
    close();
  } catch (...) {
  }
}

void RecordingWriter::create_schema() {
  auto& db = impl_->db;
  // WAL + synchronous=NORMAL: a commit is durable against a crash of this process (kill -9) and costs no fsync
  // on the hot path; only a power loss could lose the last commits.
  db.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA page_size=16384;");
  db.exec(schema::kCreate);
  auto st = db.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
  st.bind(1, std::string_view("format")).bind(2, std::string_view(schema::kFormatName)).run();
  st.bind(1, std::string_view("format_version")).bind(2, std::to_string(schema::kFormatVersion)).run();
  st.bind(1, std::string_view("stackscope_version")).bind(2, std::string_view(STACKSCOPE_VERSION)).run();
  st.bind(1, std::string_view("start_ns")).bind(2, std::to_string(monotonic_ns())).run();
  st.bind(1, std::string_view("clock.realtime_offset_ns")).bind(2, std::to_string(realtime_offset_ns())).run();
}

void RecordingWriter::set_meta(const std::string& key, const std::string& value) {
  std::lock_guard lk(mu_);
  pending_->meta.emplace_back(key, value);
}

SeriesId RecordingWriter::add_series(const SeriesInfo& info) {
  std::lock_guard lk(mu_);
  std::string key = info.host + "\x1f" + info.key();
  auto it = series_ids_.find(key);
  if (it != series_ids_.end()) return it->second;
  SeriesInfo s = info;
  s.id = static_cast<SeriesId>(series_ids_.size() + 1);
  series_ids_.emplace(key, s.id);
  pending_->new_series.push_back(s);
  stats_.series = series_ids_.size();
  return s.id;
}

void RecordingWriter::append_event(Event&& e) {
  std::unique_lock lk(mu_);
  if (failed_.load() || closed_ || pending_->events.size() >= opt_.max_pending_events) {
    ++drops_["store.backlog"];
    pending_->drops_changed = true;
    ++stats_.dropped;
    return;
  }
  pending_->events.push_back(std::move(e));
  ++stats_.events;
  if (pending_->events.size() >= opt_.events_per_block) {
    lk.unlock();
    cv_.notify_one();
  }
}

void RecordingWriter::append_samples(std::span<const Sample> samples) {
  std::lock_guard lk(mu_);
  if (failed_.load() || closed_ || pending_->samples.size() + samples.size() > opt_.max_pending_samples) {
    drops_["store.backlog.samples"] += samples.size();
    pending_->drops_changed = true;
    stats_.dropped += samples.size();
    return;
  }
  pending_->samples.insert(pending_->samples.end(), samples.begin(), samples.end());
  stats_.samples += samples.size();
}

void RecordingWriter::add_drops(std::string_view source, uint64_t n) {
  if (n == 0) return;
  std::lock_guard lk(mu_);
  auto it = drops_.find(source);
  if (it == drops_.end()) it = drops_.emplace(std::string(source), 0).first;
  it->second += n;
  stats_.dropped += n;
  pending_->drops_changed = true;
}

void RecordingWriter::add_note(std::string_view source, std::string_view text) {
  std::lock_guard lk(mu_);
  pending_->notes.emplace_back(monotonic_ns(), std::string(source), std::string(text));
}

void RecordingWriter::flush() {
  std::unique_lock lk(mu_);
  if (!thread_.joinable()) return;
  uint64_t ticket = ++flush_requested_;
  cv_.notify_one();
  flushed_cv_.wait(lk, [&] { return flush_done_ >= ticket || !thread_.joinable(); });
}

void RecordingWriter::close() {
  {
    std::lock_guard lk(mu_);
    if (closed_) return;
    pending_->meta.emplace_back("end_ns", std::to_string(monotonic_ns()));
    closed_ = true;
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  ::unlink((path_ + "-reserve").c_str());  // on a full disk: the room for what follows
  if (failed_.load()) {
    // After a failed write (a full disk) the drops counted since, and the cause, go in one small transaction in
    // the room the reserve file left; without them `info` would show none of what the recorder reported dropped.
    try {
      std::map<std::string, uint64_t, std::less<>> drops;
      std::string error;
      {
        std::lock_guard lk(mu_);
        drops = drops_;
        error = error_;
      }
      auto& db = impl_->db;
      db.exec("BEGIN");
      auto st = db.prepare("INSERT OR REPLACE INTO drops(source, n) VALUES(?, ?)");
      for (auto& [src, n] : drops) st.bind(1, src).bind(2, static_cast<int64_t>(n)).run();
      db.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES('write_error', ?)").bind(1, error).run();
      db.exec("COMMIT");
    } catch (const std::exception&) {
      try {
        impl_->db.exec("ROLLBACK");
      } catch (...) {
      }
    }
  }
  try {
    // Fold the WAL into the main file so the recording is one self-contained file.
    impl_->db.exec("PRAGMA wal_checkpoint(TRUNCATE);");
  } catch (const std::exception&) {
  }
  impl_.reset();
}

RecordingWriterStats RecordingWriter::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

std::string RecordingWriter::error() const {
  std::lock_guard lk(mu_);
  return error_;
}

bool RecordingWriter::disk_full() const {
  std::lock_guard lk(mu_);
  return disk_full_;
}

void RecordingWriter::run() {
  auto interval = std::chrono::milliseconds(opt_.flush_interval_ms);
  auto sample_interval = std::chrono::milliseconds(std::max(opt_.sample_flush_interval_ms, opt_.flush_interval_ms));
  auto last_sample_flush = std::chrono::steady_clock::now();
  auto last_checkpoint = last_sample_flush;
  std::vector<Sample> held_samples;
  for (;;) {
    auto batch = std::make_unique<Pending>();
    uint64_t ticket;
    bool stopping, explicit_flush;
    std::map<std::string, uint64_t, std::less<>> drops;
    {
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, interval, [&] {
        return stop_ || flush_requested_ > flush_done_ || pending_->events.size() >= opt_.events_per_block;
      });
      std::swap(batch, pending_);
      explicit_flush = flush_requested_ > flush_done_;
      ticket = flush_requested_;
      stopping = stop_;
      if (batch->drops_changed) drops = drops_;
    }
    // Samples wait for a longer interval than events: a block holding ~1 s of ticks per series compresses
    // several times better (host telemetry must cost only a few KB/s), and a crash still loses under 1 s.
    held_samples.insert(held_samples.end(), batch->samples.begin(), batch->samples.end());
    batch->samples.clear();
    auto now = std::chrono::steady_clock::now();
    if (stopping || explicit_flush || now - last_sample_flush >= sample_interval || failed_.load()) {
      batch->samples.swap(held_samples);
      last_sample_flush = now;
    }
    if (!failed_.load()) {
      try {
        write_batch(*batch);
        if (!drops.empty()) {
          auto st = impl_->db.prepare("INSERT OR REPLACE INTO drops(source, n) VALUES(?, ?)");
          for (auto& [src, n] : drops) st.bind(1, src).bind(2, static_cast<int64_t>(n)).run();
        }
        if (opt_.checkpoint_interval_ms > 0 &&
            now - last_checkpoint >= std::chrono::milliseconds(opt_.checkpoint_interval_ms)) {
          last_checkpoint = now;
          // PASSIVE: never waits for a reader; what a reader holds is copied next time. A failure here (a full
          // disk) leaves the data in the WAL, where SQLite still finds it.
          sqlite3_wal_checkpoint_v2(impl_->db.raw(), nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
        }
      } catch (const std::exception& e) {
        try {
          impl_->db.exec("ROLLBACK");
        } catch (...) {
        }
        std::lock_guard lk(mu_);
        failed_ = true;
        error_ = e.what();
        const auto* sqlite_error = dynamic_cast<const sql::SqliteError*>(&e);
        disk_full_ = sqlite_error && sqlite_error->disk_full();
        stats_.dropped += batch->events.size() + batch->samples.size();
        drops_["store.write_failed"] += batch->events.size() + batch->samples.size();
      }
    }
    {
      std::lock_guard lk(mu_);
      flush_done_ = ticket;
    }
    flushed_cv_.notify_all();
    if (stopping) {
      std::lock_guard lk(mu_);
      if (pending_->events.empty() && pending_->samples.empty() && held_samples.empty()) break;
    }
  }
}

void RecordingWriter::write_batch(Pending& b) {
  auto& db = impl_->db;
  bool nothing = b.events.empty() && b.samples.empty() && b.new_series.empty() && b.meta.empty() && b.notes.empty();
  if (nothing) return;
  db.exec("BEGIN");
  if (!b.new_series.empty()) {
    auto st = db.prepare(
        "INSERT INTO series(id, name, subsystem, unit, kind, category, host, device, source) "
        "VALUES(?,?,?,?,?,?,?,?,?)");
    for (auto& s : b.new_series) {
      st.bind(1, static_cast<int64_t>(s.id)).bind(2, s.name).bind(3, subsystem_name(s.subsystem)).bind(4, s.unit);
      st.bind(5, series_kind_name(s.kind)).bind(6, series_category_name(s.category)).bind(7, s.host);
      st.bind(8, s.device).bind(9, s.source).run();
    }
  }
  uint64_t raw_bytes = 0, stored_bytes = 0;
  // Events: blocks of events_per_block, encoded here so the collector threads never pay for it.
  std::vector<std::vector<uint8_t>> event_blocks;
  struct BlockInfo { int64_t t_first, t_last; int64_t n, layers, raw; };
  std::vector<BlockInfo> infos;
  for (size_t i = 0; i < b.events.size(); i += opt_.events_per_block) {
    size_t n = std::min(opt_.events_per_block, b.events.size() - i);
    std::span<const Event> part(b.events.data() + i, n);
    BlockInfo info{part.front().start_ns, part.front().start_ns, static_cast<int64_t>(n), 0, 0};
    for (const Event& e : part) {
      info.t_first = std::min(info.t_first, e.start_ns);
      info.t_last = std::max(info.t_last, e.start_ns + std::max<int64_t>(e.duration_ns, 0));
      info.layers |= int64_t{1} << static_cast<int>(e.layer);
      ++impl_->layer_counts[static_cast<int>(e.layer)];
    }
    auto raw = codec::encode_events(part, impl_->strings);
    info.raw = static_cast<int64_t>(raw.size());
    event_blocks.push_back(codec::compress(raw, opt_.zstd_level));
    infos.push_back(info);
    raw_bytes += raw.size();
  }
  // New strings go in the same transaction as the blocks that refer to them.
  auto new_strings = impl_->strings.take_new();
  if (!new_strings.empty()) {
    auto st = db.prepare("INSERT INTO strings(id, s) VALUES(?, ?)");
    for (auto& [id, s] : new_strings) st.bind(1, static_cast<int64_t>(id)).bind(2, s).run();
  }
  if (!event_blocks.empty()) {
    auto st = db.prepare("INSERT INTO event_blocks(t_first, t_last, n, layers, raw_bytes, data) VALUES(?,?,?,?,?,?)");
    for (size_t i = 0; i < event_blocks.size(); ++i) {
      st.bind(1, infos[i].t_first).bind(2, infos[i].t_last).bind(3, infos[i].n).bind(4, infos[i].layers);
      st.bind(5, infos[i].raw).bind_blob(6, event_blocks[i]).run();
      stored_bytes += event_blocks[i].size();
    }
    auto lc = db.prepare("INSERT OR REPLACE INTO layer_counts(layer, n) VALUES(?, ?)");
    for (int l = 0; l < static_cast<int>(Layer::kCount); ++l)
      if (impl_->layer_counts[l]) lc.bind(1, layer_name(static_cast<Layer>(l))).bind(2, static_cast<int64_t>(impl_->layer_counts[l])).run();
  }
  if (!b.samples.empty()) {
    int64_t t_first = b.samples.front().t_ns, t_last = t_first;
    for (auto& s : b.samples) {
      t_first = std::min(t_first, s.t_ns);
      t_last = std::max(t_last, s.t_ns);
    }
    auto raw = codec::encode_samples(b.samples);
    auto packed = codec::compress(raw, opt_.zstd_level + 2);
    auto st = db.prepare("INSERT INTO sample_blocks(t_first, t_last, n, raw_bytes, data) VALUES(?,?,?,?,?)");
    st.bind(1, t_first).bind(2, t_last).bind(3, static_cast<int64_t>(b.samples.size()));
    st.bind(4, static_cast<int64_t>(raw.size())).bind_blob(5, packed).run();
    raw_bytes += raw.size();
    stored_bytes += packed.size();
  }
  if (!b.meta.empty()) {
    auto st = db.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
    for (auto& [k, v] : b.meta) st.bind(1, k).bind(2, v).run();
  }
  if (!b.notes.empty()) {
    auto st = db.prepare("INSERT INTO notes(t, source, text) VALUES(?, ?, ?)");
    for (auto& [t, src, text] : b.notes) st.bind(1, t).bind(2, src).bind(3, text).run();
  }
  db.exec("COMMIT");
  std::lock_guard lk(mu_);
  stats_.flushed_events += b.events.size();
  stats_.flushed_samples += b.samples.size();
  stats_.bytes_raw += raw_bytes;
  stats_.bytes_stored += stored_bytes;
}

}  // namespace stackscope
