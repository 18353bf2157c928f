#include "store/recording_reader.h"

#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "store/block_codec.h"
#include "store/errors.h"
#include "store/recording_schema.h"
#include "store/sqlite_db.h"

namespace stackscope {

struct RecordingReader::Impl {
  explicit Impl(const std::string& path, sql::Db::Mode mode) : db(path, mode) {}
  sql::Db db;
};

namespace {
// Runs `fn`, turning SQLite failures into RecordingError that names the file.
template <typename F>
auto guarded(const std::string& path, F&& fn) {
  try {
    return fn();
  } catch (const sql::SqliteError& e) {
    throw RecordingError("cannot read recording " + path + ": " + e.what());
  }
}
}  // namespace

RecordingReader::RecordingReader(const std::string& path) : path_(path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) throw RecordingError("cannot open recording " + path + ": no such file");
  if (!S_ISREG(st.st_mode)) throw RecordingError("cannot open recording " + path + ": not a regular file");
  if (::access(path.c_str(), R_OK) != 0) throw RecordingError("cannot open recording " + path + ": permission denied");
  // Read-write when we may (the file and its folder, where SQLite keeps -wal and -shm), so that SQLite recovers
  // the WAL of a recorder that was killed and folds it into the file when we close. Otherwise read-only: a
  // recording without a -wal holding data is opened immutable (no -shm, no locks: a read-only mount or folder
  // works); with one, SQLite's read-only WAL reading where it can, else the main file alone, said in open_note().
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, std::max<size_t>(path.rfind('/'), 1));
  const bool writable = ::access(path.c_str(), W_OK) == 0 && ::access(dir.c_str(), W_OK) == 0;
  struct stat wal{};
  const bool wal_data = ::stat((path + "-wal").c_str(), &wal) == 0 && wal.st_size > 0;
  guarded(path, [&] {
    auto mode = writable ? sql::Db::Mode::read_write : wal_data ? sql::Db::Mode::read_only : sql::Db::Mode::immutable;
    try {
      impl_ = std::make_unique<Impl>(path, mode);
      impl_->db.prepare("SELECT count(*) FROM sqlite_master").step();
    } catch (const sql::SqliteError&) {
      if (mode != sql::Db::Mode::read_only) throw;
      impl_ = std::make_unique<Impl>(path, sql::Db::Mode::immutable);
      open_note_ = fmt::format("{}-wal holds {} bytes that cannot be replayed without write permission on the file "
                               "and its folder: read without them",
                               path, wal.st_size);
    }
    if (mode != sql::Db::Mode::read_write && open_note_.empty())
      open_note_ = wal_data ? "opened read-only (the -wal beside it was read)" : "opened read-only";
    auto& db = impl_->db;
    bool has_meta = false;
    {
      auto q = db.prepare("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='meta'");
      has_meta = q.step() && q.i64(0) == 1;
    }
    if (!has_meta) throw RecordingError(path + " is not a stackscope recording (no meta table)");
    {
      auto q = db.prepare("SELECT key, value FROM meta");
      while (q.step()) meta_[q.text(0)] = q.text(1);
    }
    if (meta_or("format") != schema::kFormatName)
      throw RecordingError(path + " is not a stackscope recording (format '" + meta_or("format") + "')");
    int version = std::atoi(meta_or("format_version", "0").c_str());
    if (version < 1 || version > schema::kFormatVersion)
      throw RecordingError(path + ": recording format version " + std::to_string(version) +
                           " is not supported by this stackscope (reads 1.." + std::to_string(schema::kFormatVersion) + ")");
    {
      auto q = db.prepare("SELECT id, s FROM strings ORDER BY id");
      while (q.step()) {
        auto id = q.i64(0);
        if (id < 0 || id > 100'000'000) throw RecordingError(path + ": corrupt string table (id " + std::to_string(id) + ")");
        if (static_cast<size_t>(id) >= strings_.size()) strings_.resize(id + 1);
        strings_[id] = q.text(1);
      }
    }
    {
      auto q = db.prepare("SELECT id, name, subsystem, unit, kind, category, host, device, source FROM series ORDER BY id");
      while (q.step()) {
        SeriesInfo s;
        s.id = static_cast<SeriesId>(q.i64(0));
        s.name = q.text(1);
        auto sub = parse_subsystem(q.text(2));
        auto kind = parse_series_kind(q.text(4));
        auto cat = parse_series_category(q.text(5));
        if (!sub || !kind || !cat) throw RecordingError(path + ": corrupt series row " + std::to_string(s.id));
        s.subsystem = *sub;
        s.unit = q.text(3);
        s.kind = *kind;
        s.category = *cat;
        s.host = q.text(6);
        s.device = q.text(7);
        s.source = q.text(8);
        series_index_[s.id] = series_.size();
        series_.push_back(std::move(s));
      }
    }
    return 0;
  });
}

RecordingReader::~RecordingReader() = default;

std::string RecordingReader::meta_or(const std::string& key, const std::string& fallback) const {
  auto it = meta_.find(key);
  return it == meta_.end() ? fallback : it->second;
}

const SeriesInfo* RecordingReader::series_by_id(SeriesId id) const {
  auto it = series_index_.find(id);
  return it == series_index_.end() ? nullptr : &series_[it->second];
}

const std::string& RecordingReader::string_at(uint32_t id) const {
  if (id >= strings_.size()) throw RecordingError(path_ + ": reference to unknown string " + std::to_string(id));
  return strings_[id];
}

void RecordingReader::for_each_event_ref(const EventFilter& f,
                                         const std::function<void(const codec::EventRef&)>& fn) const {
  int64_t mask = 0;
  for (Layer l : f.layers) mask |= int64_t{1} << static_cast<int>(l);
  if (f.layers.empty()) mask = -1;
  guarded(path_, [&] {
    auto q = impl_->db.prepare(
        "SELECT id, data FROM event_blocks WHERE (layers & ?) != 0 AND t_last >= ? AND t_first <= ? ORDER BY id");
    q.bind(1, mask).bind(2, f.t_from).bind(3, f.t_to);
    std::vector<uint8_t> raw;
    while (q.step()) {
      const std::string what = path_ + ": event block " + std::to_string(q.i64(0));
      codec::decompress_into(q.blob(1), schema::kMaxBlockBytes, what, raw);
      codec::decode_event_refs(raw, strings_.size(), what, [&](const codec::EventRef& e) {
        if (!(mask & (int64_t{1} << static_cast<int>(e.layer)))) return;
        if (e.start_ns + e.duration_ns < f.t_from || e.start_ns > f.t_to) return;
        fn(e);
      });
    }
    return 0;
  });
}

void RecordingReader::for_each_event(const EventFilter& f, const std::function<void(const Event&)>& fn) const {
  Event e;
  for_each_event_ref(f, [&](const codec::EventRef& r) {
    e.layer = r.layer;
    e.flags = r.flags;
    e.pid = r.pid;
    e.tid = r.tid;
    e.start_ns = r.start_ns;
    e.duration_ns = r.duration_ns;
    e.name = strings_[r.name];
    e.args.resize(r.args.size());
    for (size_t i = 0; i < r.args.size(); ++i) {
      const codec::ArgRef& a = r.args[i];
      e.args[i].key = strings_[a.key];
      switch (a.kind) {
        case codec::ArgKind::integer: e.args[i].value = a.integer; break;
        case codec::ArgKind::real: e.args[i].value = a.real; break;
        case codec::ArgKind::string: e.args[i].value = strings_[a.text]; break;
      }
    }
    fn(e);
  });
}

std::optional<uint32_t> RecordingReader::find_string(std::string_view s) const {
  for (size_t i = 0; i < strings_.size(); ++i)
    if (strings_[i] == s) return static_cast<uint32_t>(i);
  return std::nullopt;
}

void RecordingReader::for_each_sample_run(
    const std::function<void(const SeriesInfo&, std::span<const int64_t>, std::span<const double>)>& fn) const {
  guarded(path_, [&] {
    auto q = impl_->db.prepare("SELECT id, data FROM sample_blocks ORDER BY id");
    std::vector<uint8_t> raw;
    while (q.step()) {
      std::string what = path_ + ": sample block " + std::to_string(q.i64(0));
      codec::decompress_into(q.blob(1), schema::kMaxBlockBytes, what, raw);
      codec::decode_samples(raw, what, [&](SeriesId id, std::span<const int64_t> t, std::span<const double> v) {
        const SeriesInfo* s = series_by_id(id);
        if (!s) throw RecordingError(what + ": samples of unknown series " + std::to_string(id));
        fn(*s, t, v);
      });
    }
    return 0;
  });
}

std::map<SeriesId, std::pair<std::vector<int64_t>, std::vector<double>>> RecordingReader::load_samples() const {
  std::map<SeriesId, std::pair<std::vector<int64_t>, std::vector<double>>> out;
  for_each_sample_run([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
    auto& [tt, vv] = out[s.id];
    tt.insert(tt.end(), t.begin(), t.end());
    vv.insert(vv.end(), v.begin(), v.end());
  });
  return out;
}

std::vector<Finding> RecordingReader::findings() const {
  return guarded(path_, [&] {
    std::vector<Finding> out;
    auto q = impl_->db.prepare(
        "SELECT id, detector, layer, subsystem, host, subject, t_start, t_end, score, summary, evidence FROM findings "
        "ORDER BY t_start, id");
    while (q.step()) {
      Finding f;
      f.id = q.i64(0);
      f.detector = q.text(1);
      f.layer = q.text(2);
      f.subsystem = q.text(3);
      f.host = q.text(4);
      f.subject = q.text(5);
      f.t_start_ns = q.i64(6);
      f.t_end_ns = q.i64(7);
      f.score = q.f64(8);
      f.summary = q.text(9);
      auto j = nlohmann::json::parse(q.text(10), nullptr, false);
      if (j.is_array())
        for (auto& e : j)
          if (e.is_object())
            f.evidence.push_back({e.value("subject", ""), e.value("feature", ""), e.value("value", 0.0),
                                  e.value("expected", 0.0), e.value("score", 0.0)});
      out.push_back(std::move(f));
    }
    return out;
  });
}

std::vector<Note> RecordingReader::notes() const {
  return guarded(path_, [&] {
    std::vector<Note> out;
    auto q = impl_->db.prepare("SELECT t, source, text FROM notes ORDER BY id");
    while (q.step()) out.push_back({q.i64(0), q.text(1), q.text(2)});
    return out;
  });
}

std::optional<std::pair<int64_t, int64_t>> RecordingReader::data_span() const {
  return guarded(path_, [&]() -> std::optional<std::pair<int64_t, int64_t>> {
    auto q = impl_->db.prepare(
        "SELECT min(f), max(l) FROM (SELECT t_first AS f, t_last AS l FROM event_blocks "
        "UNION ALL SELECT t_first, t_last FROM sample_blocks)");
    if (!q.step() || q.is_null(0)) return std::nullopt;
    return std::pair{q.i64(0), q.i64(1)};
  });
}

RecordingSummary RecordingReader::summary() const {
  return guarded(path_, [&] {
    RecordingSummary s;
    s.start_ns = std::atoll(meta_or("start_ns", "0").c_str());
    s.end_ns = std::atoll(meta_or("end_ns", "0").c_str());
    s.closed_cleanly = meta_.count("end_ns") > 0;
    s.realtime_offset_ns = std::atoll(meta_or("clock.realtime_offset_ns", "0").c_str());
    auto& db = impl_->db;
    {
      auto q = db.prepare("SELECT layer, n FROM layer_counts");
      while (q.step()) s.events_by_layer[q.text(0)] = static_cast<uint64_t>(q.i64(1));
    }
    for (auto& ser : series_) ++s.series_by_subsystem[std::string(subsystem_name(ser.subsystem))];
    {
      auto q = db.prepare("SELECT coalesce(sum(n),0), coalesce(max(t_last),0) FROM sample_blocks");
      if (q.step()) {
        s.samples = static_cast<uint64_t>(q.i64(0));
        s.last_data_ns = q.i64(1);
      }
    }
    {
      auto q = db.prepare("SELECT coalesce(max(t_last),0) FROM event_blocks");
      if (q.step()) s.last_data_ns = std::max(s.last_data_ns, q.i64(0));
    }
    {
      auto q = db.prepare("SELECT source, n FROM drops");
      while (q.step()) s.drops[q.text(0)] = static_cast<uint64_t>(q.i64(1));
    }
    {
      auto q = db.prepare("SELECT count(*) FROM findings");
      if (q.step()) s.findings = static_cast<uint64_t>(q.i64(0));
    }
    struct stat st{};
    if (::stat(path_.c_str(), &st) == 0) s.file_bytes = static_cast<uint64_t>(st.st_size);
    return s;
  });
}

bool store_findings(const std::string& path, const std::string& detector, const std::vector<Finding>& findings) {
  // A recording we may only read (read-only mount, another user's file or folder) is analysed all the same.
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, std::max<size_t>(path.rfind('/'), 1));
  if (::access(path.c_str(), W_OK) != 0 || ::access(dir.c_str(), W_OK) != 0) return false;
  try {
    sql::Db db(path, sql::Db::Mode::read_write);
    db.exec("BEGIN");
    db.prepare("DELETE FROM findings WHERE detector = ?").bind(1, detector).run();
    auto st = db.prepare(
        "INSERT INTO findings(detector, layer, subsystem, host, subject, t_start, t_end, score, summary, evidence) "
        "VALUES(?,?,?,?,?,?,?,?,?,?)");
    for (auto& f : findings) {
      nlohmann::json ev = nlohmann::json::array();
      for (auto& e : f.evidence)
        ev.push_back({{"subject", e.subject}, {"feature", e.feature}, {"value", e.value}, {"expected", e.expected},
                      {"score", e.score}});
      st.bind(1, detector).bind(2, f.layer).bind(3, f.subsystem).bind(4, f.host).bind(5, f.subject);
      st.bind(6, f.t_start_ns).bind(7, f.t_end_ns).bind(8, f.score).bind(9, f.summary);
      st.bind(10, ev.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)).run();
    }
    db.exec("COMMIT");
  } catch (const sql::SqliteError& e) {
    throw RecordingError("cannot store findings in " + path + ": " + e.what());
  }
  return true;
}

}  // namespace stackscope
