#include "online/online_detector.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <span>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analyze/incidents/incident_engine.h"
#include "analyze/incidents/incident_input_builder.h"
#include "analyze/incidents/online_generations.h"
#include "export/incident_report.h"
#include "model/clock.h"
#include "store/output_file.h"
#include "model/process.h"

namespace stackscope::online {

namespace {

using analyze::CallRecord;
using analyze::incidents::IncidentInputBuilder;

// What the windows need of an event (analyze::CallRecord without its name, which is an id here).
struct PendingEvent {
  CallRecord record;  // record.name is empty; record.name_key is the interned name
};

struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

constexpr size_t kMaxPendingEvents = 2'000'000, kMaxPendingSamples = 2'000'000;  // about 1 s of a very busy job
constexpr size_t kMinWindows = 8;        // the engine needs a steady stretch to judge a window by
constexpr int64_t kLateNs = 500'000'000;  // a window is complete this long after its end (samples, ring buffers)
constexpr size_t kMaxStepOps = 20'000;    // the step-detection prefix, copied at every pass

// CPU time of the calling thread, ms: the engine's own cost, whatever else the machine runs.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// The incidents log, opened to append (never truncated: what an earlier run or a killed agent wrote stays), not
// through a symbolic link, created 0600 (it names jobs and culprits). `last_id`: the highest incident number it
// holds, so that this run's numbers follow them; `ends_line`: false when its last line was cut (a kill -9, a full
// disk), so the next one starts on a line of its own.
std::FILE* open_incident_log(const std::string& path, int& last_id, bool& ends_line) {
  check_output_path(path, {}, "--detect-log");  // a clear message for a symbolic link or a folder
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error(fmt::format("--detect-log: cannot write {}: {}", path, std::strerror(errno)));
  last_id = 0;
  ends_line = true;
  struct stat st{};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {  // never read a pipe or a device
    std::ifstream in(path, std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("id") && j["id"].is_number_integer())
        last_id = static_cast<int>(std::clamp<int64_t>(j["id"].get<int64_t>(), last_id, 1 << 30));
      ends_line = !in.eof();
    }
  }
  std::FILE* f = ::fdopen(fd, "a");
  if (!f) {
    ::close(fd);
    throw std::runtime_error(fmt::format("--detect-log: cannot write {}: {}", path, std::strerror(errno)));
  }
  return f;
}

std::string culprit_text(const Incident& inc) {
  if (inc.cause.culprits.empty()) return "no culprit named";
  const Culprit& c = inc.cause.culprits.front();
  return fmt::format("culprit {} {}{}", c.kind, c.name, c.pid ? fmt::format(" (pid {})", *c.pid) : "");
}

}  // namespace

struct OnlineDetector::Engine {
  OnlineDetectOptions opt;
  int64_t t0 = 0, width = 0, realtime_offset = 0;
  size_t horizon = 0;  // windows
  size_t span = 0;     // windows between generations: min(horizon, evaluated_s); a pass evaluates < 2 x span
  std::set<uint32_t> job_pids;
  std::FILE* log = nullptr;
  bool own_log = false;
  bool log_ends_line = true;  // false: the log's last line was cut; this run's first line starts a new one

  // Filled by the collectors' threads (under mu).
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::vector<PendingEvent> events;
  std::vector<Sample> samples;
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> name_ids;
  std::vector<std::string> new_names;
  std::vector<SeriesInfo> new_series;
  uint64_t dropped = 0;

  // The engine's thread only.
  std::deque<std::string> names;  // by interned id; a deque, so views into it stay valid
  std::map<SeriesId, SeriesInfo> series;
  struct Generation {
    size_t first = 0;  // its first window on the recording's grid
    std::unique_ptr<IncidentInputBuilder> builder;
  };
  std::deque<Generation> generations;  // oldest first; at most two (three while the next one waits for its start)
  analyze::incidents::OnlineGenerations plan{1};
  struct Tracked {
    Incident last;  // as the engine last reported it, with detected_at / cause_at
    bool open = true;
    bool withdrawn = false;  // the job's end, seen as a drop while it was going on (see run_engine)
    double carried_s = 0;  // job time it lost before the windows the engine evaluates now (dropped generations)
  };
  std::vector<Tracked> tracked;
  int next_id = 1;
  std::thread thread;
  int64_t replay_now = 0;  // replay mode: the time of the last pass
  std::atomic<uint64_t> passes{0};
  std::atomic<size_t> last_windows{0}, max_windows{0};
  std::atomic<double> last_cpu_ms{0}, total_cpu_ms{0};
  // The last pass's progress per window and steady level, from window `last_first` on: the part of an open
  // incident a dropped generation saw is measured on it.
  std::vector<double> last_progress;
  double last_steady = 0;
  size_t last_first = 0;

  // The last value of each tracer watching series (0/1 steps written only when a family is attached or
  // detached): a generation started mid-run is told the state at its start, or it would read a detached family's
  // silence before the next toggle as the job stalling.
  std::map<SeriesId, double> watching_now;

  // Starts the generations due with `complete` windows so far (the first one at once).
  void start_generations(size_t complete) {
    while (plan.start_due(complete)) {
      start_generation(plan.next_first());
      plan.started();
    }
  }

  void start_generation(size_t first) {
    analyze::WindowGrid g{t0 + static_cast<int64_t>(first) * width, width, plan.grid_windows()};
    generations.push_back({first, std::make_unique<IncidentInputBuilder>(g, job_pids, kMaxStepOps)});
    for (const auto& [id, value] : watching_now) {
      const int64_t at = g.first_ns;
      if (auto it = series.find(id); it != series.end())
        generations.back().builder->add(it->second, std::span(&at, 1), std::span(&value, 1));
    }
  }

  // Complete windows at `now` on the recording's grid.
  size_t complete_windows(int64_t now) const {
    return now - kLateNs <= t0 ? 0 : static_cast<size_t>((now - kLateNs - t0) / width);
  }

  void take_and_feed() {
    std::vector<PendingEvent> ev;
    std::vector<Sample> sm;
    std::vector<std::string> nn;
    std::vector<SeriesInfo> ns;
    {
      std::lock_guard lk(mu);
      ev.swap(events);
      sm.swap(samples);
      nn.swap(new_names);
      ns.swap(new_series);
    }
    for (auto& n : nn) names.push_back(std::move(n));
    for (auto& s : ns) series[s.id] = std::move(s);
    for (PendingEvent& e : ev) {
      e.record.name = names[e.record.name_key];
      for (auto& g : generations) g.builder->add(e.record);
    }
    // Sample runs per series, in arrival order (each collector appends its series in time order), by series id.
    const std::vector<uint32_t> order = by_series(sm);
    std::vector<int64_t> t;
    std::vector<double> v;
    for (size_t i = 0; i < order.size();) {
      const SeriesId id = sm[order[i]].series;
      t.clear();
      v.clear();
      for (; i < order.size() && sm[order[i]].series == id; ++i) {
        t.push_back(sm[order[i]].t_ns);
        v.push_back(sm[order[i]].value);
      }
      if (auto it = series.find(id); it != series.end()) {
        for (auto& g : generations) g.builder->add(it->second, t, v);
        if (it->second.name.ends_with(".watching")) watching_now[it->first] = v.back();
      }
    }
  }

  // The samples' indices, stably ordered by series id. Ids are small and dense (the recorder numbers series as
  // they are declared), so a counting pass does it; a sort of a second's samples was a tenth of the pass.
  static std::vector<uint32_t> by_series(const std::vector<Sample>& sm) {
    std::vector<uint32_t> order(sm.size());
    SeriesId max_id = 0;
    for (const Sample& s : sm) max_id = std::max(max_id, s.series);
    if (max_id > 4 * sm.size() + 65'536) {  // sparse ids: sorted
      for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return sm[a].series < sm[b].series; });
      return order;
    }
    std::vector<uint32_t> next(static_cast<size_t>(max_id) + 2, 0);  // per id: where its next sample goes
    for (const Sample& s : sm) ++next[s.series + 1];
    for (size_t k = 1; k < next.size(); ++k) next[k] += next[k - 1];
    for (uint32_t i = 0; i < sm.size(); ++i) order[next[sm[i].series]++] = i;
    return order;
  }

  double rel(int64_t t) const { return static_cast<double>(t - t0) * 1e-9; }

  void emit(const Tracked& tr, const char* what) {
    const Incident& inc = tr.last;
    std::string line;
    if (std::string_view(what) == "open")
      line = fmt::format("stackscope: incident #{} from {:.1f} s: {}, {} (detected at {:.1f} s)", inc.id,
                         rel(inc.start_ns), cause_class_name(inc.cause.cls), culprit_text(inc),
                         rel(*inc.detected_at_ns));
    else if (std::string_view(what) == "cause")
      line = fmt::format("stackscope: incident #{} from {:.1f} s: cause now {}, {}", inc.id, rel(inc.start_ns),
                         cause_class_name(inc.cause.cls), culprit_text(inc));
    else if (std::string_view(what) == "withdrawn")
      line = fmt::format("stackscope: incident #{} withdrawn: {:.1f}-{:.1f} s was the job ending (a shutdown phase), "
                         "not a slowdown", inc.id, rel(inc.start_ns), rel(inc.end_ns));
    else
      line = fmt::format("stackscope: incident #{} closed: {:.1f}-{:.1f} s, {}, {}, {:.1f} s of job time lost", inc.id,
                         rel(inc.start_ns), rel(inc.end_ns), cause_class_name(inc.cause.cls), culprit_text(inc),
                         inc.impact_s);
    std::cerr << line << "\n" << std::flush;
    if (log) {
      nlohmann::json j = incident_json(inc, t0, realtime_offset);
      j["online"] = what;
      for (const auto& [key, value] : opt.log_fields) j[key] = value;
      std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      if (!log_ends_line) {
        text.insert(0, "\n");
        log_ends_line = true;
      }
      std::fwrite(text.data(), 1, text.size(), log);
      std::fflush(log);
    }
  }

  // One pass of the engine over the complete windows of the oldest generation; `now`: when (detection times).
  // `ended`: the recording is closed, so its last windows are the job's end (a shutdown phase, not a drop still
  // in progress).
  void run_engine(int64_t now, size_t complete, bool ended = false) {
    if (generations.empty() || complete <= generations.front().first) return;
    const Generation& g = generations.front();
    const size_t n = std::min(complete - g.first, plan.grid_windows());
    if (n < kMinWindows) return;
    analyze::incidents::IncidentOptions io;
    io.episodes.open_end = !ended;
    io.episodes.v1_thresholds = opt.episodes_v1;
    // The start-up lasts until the job first runs at its steady pace (up to max_edge_windows), however short the
    // run so far: a slow start seen 8 windows in is not an incident.
    io.episodes.max_edge_fraction = 1.0;
    // A later generation starts mid-run: low windows at its head are an incident still in view, not start-up.
    if (g.first > 0) io.episodes.max_edge_windows = 0;
    const auto input = g.builder->snapshot(n);
    const auto rep = analyze::incidents::find_incidents(input, io);
    passes.fetch_add(1);
    last_windows = n;
    if (n > max_windows) max_windows = n;
    last_progress = input.progress.signal.per_window;
    last_steady = rep.steady_per_window;
    last_first = g.first;
    const int64_t view_first = t0 + static_cast<int64_t>(g.first) * width;
    const int64_t complete_end = t0 + static_cast<int64_t>(complete) * width;
    // Still open: the episode reaches the last windows (the engine merges low stretches across this gap).
    const int64_t open_gap = static_cast<int64_t>(io.episodes.merge_gap + 1) * width;
    std::vector<bool> seen(tracked.size(), false);
    for (Incident inc : rep.incidents) {
      // At a later builder's head: the windows before were judged by the older builder, so this is an incident
      // already reported (ended up to a merge gap before), never a new one.
      const bool at_head = g.first > 0 && inc.start_ns <= view_first;
      auto match = std::find_if(tracked.begin(), tracked.end(), [&](const Tracked& t) {
        return t.last.start_ns < inc.end_ns && inc.start_ns < t.last.end_ns + (at_head ? open_gap : 0);
      });
      if (match == tracked.end() && at_head) continue;
      // First judged an incident only after it had ended (the level, or the job's own variation as known now,
      // moved since it was live): hindsight, not something going on. Online tells what is happening; `analyze`
      // judges the past with the whole run. (In kept clean GPU runs 11 of 27 false online
      // incidents were told 5-65 s after their stretch had ended; so were those of three held-out clean runs. The
      // impactful episodes of held-out fault runs were told at most 4.3 s after onset, while they lasted.)
      if (match == tracked.end() && inc.end_ns + open_gap <= complete_end) continue;
      if (match == tracked.end()) {
        Tracked t;
        inc.id = next_id++;
        inc.detected_at_ns = now;
        if (inc.cause.cls != CauseClass::unexplained) inc.cause_at_ns = now;
        t.last = std::move(inc);
        tracked.push_back(std::move(t));
        seen.push_back(true);
        emit(tracked.back(), "open");
        continue;
      }
      seen[static_cast<size_t>(match - tracked.begin())] = true;
      if (!match->open) continue;  // reported and closed: history the engine sees again
      // Open since before the windows in view: its start and the time lost before them are kept.
      if (inc.start_ns <= view_first && match->last.start_ns < inc.start_ns) {
        inc.start_ns = match->last.start_ns;
        inc.impact_s += match->carried_s;
      }
      const bool changed = inc.cause.cls != match->last.cause.cls;
      inc.id = match->last.id;
      inc.detected_at_ns = match->last.detected_at_ns;
      if (!changed)
        inc.cause_at_ns = match->last.cause_at_ns;
      else if (inc.cause.cls != CauseClass::unexplained)
        inc.cause_at_ns = now;
      match->last = std::move(inc);
      if (changed) emit(*match, "cause");
    }
    for (size_t i = 0; i < tracked.size(); ++i) {
      Tracked& t = tracked[i];
      if (!t.open) continue;
      // The last pass, made once the recording has ended, knows the end: an open incident it no longer reports that
      // reaches into the shutdown phase was the job winding down (its interpreter exiting, say) while it was seen as
      // a drop still going on, a few windows before the job had exited. Withdrawn, not closed as an incident.
      const bool ending = ended && !seen[i] && std::any_of(rep.phases.begin(), rep.phases.end(), [&](const Phase& p) {
        return p.kind == PhaseKind::shutdown && t.last.end_ns > p.start_ns;
      });
      if (ending) {
        t.open = false;
        t.withdrawn = true;
        emit(t, "withdrawn");
        continue;
      }
      // Closed when it ended a merge gap ago, or when the engine no longer sees it (its baseline moved).
      if (!seen[i] || t.last.end_ns + open_gap <= complete_end) {
        t.open = false;
        emit(t, "close");
      }
    }
  }

  void pass(int64_t now) {
    const double cpu0 = thread_cpu_ms();
    take_and_feed();
    const size_t complete = complete_windows(now);
    run_engine(now, complete);
    // Rolling horizon: a younger generation from `horizon` windows on, the older one dropped when full.
    start_generations(complete);
    while (plan.drop_due(complete)) {
      carry_open_incidents(generations[1].first);
      generations.pop_front();
      plan.dropped();
    }
    const double cpu = thread_cpu_ms() - cpu0;
    last_cpu_ms = cpu;
    total_cpu_ms = total_cpu_ms + cpu;  // this thread is the only writer
  }

  // The oldest generation goes, the next one's view starting at window `next_first`: an open incident that began
  // before it keeps the job time it lost there (measured on the last pass, which saw it).
  void carry_open_incidents(size_t next_first) {
    const int64_t view_first = t0 + static_cast<int64_t>(next_first) * width;
    const analyze::WindowGrid g{t0 + static_cast<int64_t>(last_first) * width, width, last_progress.size()};
    for (Tracked& t : tracked) {
      if (!t.open || t.last.start_ns >= view_first || next_first <= last_first) continue;
      const int64_t from = std::max(t.last.start_ns, g.first_ns);
      const size_t a = static_cast<size_t>((from - g.first_ns) / width), b = next_first - last_first - 1;
      t.carried_s += analyze::incidents::impact_seconds(last_progress, last_steady, g, a, b);
    }
  }

  void start_thread() {
    thread = std::thread([this] {
      name_this_thread("ss-detect");
      loop();
    });
  }

  void loop() {
    int64_t next = t0 + width + kLateNs;
    for (;;) {
      {
        std::unique_lock lk(mu);
        cv.wait_for(lk, std::chrono::nanoseconds(std::max<int64_t>(0, next - monotonic_ns())), [&] { return stop; });
        if (stop) return;
      }
      try {
        pass(monotonic_ns());
      } catch (const std::exception& e) {
        std::cerr << "stackscope: --detect: " << e.what() << "\n";
      }
      next += width;
      if (const int64_t now = monotonic_ns(); next < now) next = now;  // behind: no burst of catch-up passes
    }
  }
};

OnlineDetector::OnlineDetector(TelemetrySink& next, std::set<uint32_t> job_pids, OnlineDetectOptions options)
    : next_(next), engine_(std::make_unique<Engine>()) {
  Engine& e = *engine_;
  if (!(options.window_s > 0) || !(options.horizon_s >= options.window_s) || !(options.evaluated_s >= options.window_s))
    throw std::invalid_argument("--detect: the window must be > 0 and the horizon at least one window");
  e.opt = std::move(options);
  e.width = static_cast<int64_t>(e.opt.window_s * 1e9);
  e.horizon = static_cast<size_t>(e.opt.horizon_s / e.opt.window_s);
  e.job_pids = std::move(job_pids);
  e.span = std::max<size_t>(1, std::min(e.horizon, static_cast<size_t>(e.opt.evaluated_s / e.opt.window_s)));
  e.t0 = e.opt.replay_start_ns ? *e.opt.replay_start_ns : monotonic_ns();
  e.realtime_offset = e.opt.replay_start_ns ? e.opt.replay_realtime_offset_ns : realtime_offset_ns();
  if (e.opt.log_path == "-") {
    e.log = stderr;
  } else if (!e.opt.log_path.empty()) {
    int last_id = 0;
    e.log = open_incident_log(e.opt.log_path, last_id, e.log_ends_line);
    e.own_log = true;
    e.next_id = last_id + 1;
  }
  e.plan = analyze::incidents::OnlineGenerations(e.span);
  e.start_generations(0);
  if (!e.opt.replay_start_ns) e.start_thread();  // replay: the passes are made by replay_pass
}

OnlineDetector::PassStats OnlineDetector::pass_stats() const {
  return {engine_->passes.load(), engine_->last_windows.load(), engine_->max_windows.load(),
          engine_->last_cpu_ms.load(), engine_->total_cpu_ms.load()};
}

OnlineDetector::~OnlineDetector() {
  Engine& e = *engine_;
  {
    std::lock_guard lk(e.mu);
    e.stop = true;
  }
  e.cv.notify_all();
  if (e.thread.joinable()) e.thread.join();
  if (e.own_log && e.log) std::fclose(e.log);
  e.log = nullptr;
}

SeriesId OnlineDetector::add_series(const SeriesInfo& info) {
  const SeriesId id = next_.add_series(info);
  SeriesInfo copy = info;
  copy.id = id;
  std::lock_guard lk(engine_->mu);
  engine_->new_series.push_back(std::move(copy));
  return id;
}

void OnlineDetector::append_event(Event&& ev) {
  switch (ev.layer) {
    case Layer::cuda:
    case Layer::nccl:
    case Layer::torch:
    case Layer::python:
    case Layer::kernel: {
      PendingEvent p{analyze::call_record_of(ev)};
      p.record.name = {};
      Engine& e = *engine_;
      std::lock_guard lk(e.mu);
      if (e.events.size() >= kMaxPendingEvents) {
        ++e.dropped;
        break;
      }
      auto it = e.name_ids.find(std::string_view(ev.name));
      if (it == e.name_ids.end()) {
        it = e.name_ids.emplace(ev.name, static_cast<uint32_t>(e.name_ids.size())).first;
        e.new_names.push_back(ev.name);
      }
      p.record.name_key = it->second;
      e.events.push_back(p);
      break;
    }
    default:
      break;
  }
  next_.append_event(std::move(ev));
}

void OnlineDetector::append_samples(std::span<const Sample> samples) {
  {
    Engine& e = *engine_;
    std::lock_guard lk(e.mu);
    if (e.samples.size() + samples.size() <= kMaxPendingSamples)
      e.samples.insert(e.samples.end(), samples.begin(), samples.end());
    else
      e.dropped += samples.size();
  }
  next_.append_samples(samples);
}

void OnlineDetector::replay_pass(int64_t now_ns) {
  Engine& e = *engine_;
  if (!e.opt.replay_start_ns) throw std::logic_error("replay_pass: not a replay");
  e.replay_now = now_ns;
  e.pass(now_ns);
}

namespace {

// Where a replay's events and samples go after the engine has seen them: nowhere (series keep their ids).
class DiscardSink final : public TelemetrySink {
 public:
  SeriesId add_series(const SeriesInfo& info) override { return info.id; }
  void append_event(Event&&) override {}
  void append_samples(std::span<const Sample>) override {}
  void add_drops(std::string_view, uint64_t) override {}
  void add_note(std::string_view, std::string_view) override {}
};

}  // namespace

void replay_online(const RecordingReader& r, const std::string& log_path, bool episodes_v1,
                   const std::function<void(int64_t now_ns, const OnlineDetector::PassStats&)>& after_pass) {
  const auto span = r.data_span();
  if (!span) return;
  const RecordingSummary summary = r.summary();
  std::set<uint32_t> job_pids;
  try {
    if (const std::string pid = r.meta_or("pid"); !pid.empty()) job_pids.insert(static_cast<uint32_t>(std::stoul(pid)));
  } catch (const std::exception&) {
    // a recording of the whole host: no job pid
  }
  DiscardSink discard;
  std::optional<OutputFile> log_file;
  if (!log_path.empty() && log_path != "-") log_file.emplace(log_path, OutputFileOptions{.inputs = {r.path()}});
  OnlineDetectOptions o;
  o.log_path = log_file ? log_file->write_path() : log_path;
  o.host = r.meta_or("host");
  o.replay_start_ns = summary.start_ns > 0 ? summary.start_ns : span->first;
  o.replay_realtime_offset_ns = summary.realtime_offset_ns;
  o.episodes_v1 = episodes_v1;
  OnlineDetector det(discard, job_pids, o);
  for (const SeriesInfo& s : r.series()) det.add_series(s);
  // Each event arrives when it has ended (a call is recorded at its return); samples at their time.
  std::vector<std::pair<int64_t, Event>> events;
  r.for_each_event({{Layer::cuda, Layer::nccl, Layer::torch, Layer::python, Layer::kernel}}, [&](const Event& e) {
    events.emplace_back(e.start_ns + std::max<int64_t>(0, e.duration_ns), e);
  });
  std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Sample> samples;
  r.for_each_sample_run([&](const SeriesInfo& s, std::span<const int64_t> t, std::span<const double> v) {
    for (size_t i = 0; i < t.size() && i < v.size(); ++i) samples.push_back({s.id, t[i], v[i]});
  });
  std::stable_sort(samples.begin(), samples.end(), [](const Sample& a, const Sample& b) { return a.t_ns < b.t_ns; });
  const auto width = static_cast<int64_t>(o.window_s * 1e9);
  size_t ei = 0, si = 0;
  for (int64_t now = *o.replay_start_ns + width + kLateNs; now <= span->second + width; now += width) {
    for (; ei < events.size() && events[ei].first <= now; ++ei) det.append_event(std::move(events[ei].second));
    const size_t s0 = si;
    while (si < samples.size() && samples[si].t_ns <= now) ++si;
    if (si > s0) det.append_samples(std::span(samples).subspan(s0, si - s0));
    det.replay_pass(now);
    if (after_pass) after_pass(now, det.pass_stats());
  }
  det.finish();
  if (log_file) log_file->commit();
}

void OnlineDetector::add_drops(std::string_view source, uint64_t n) { next_.add_drops(source, n); }
void OnlineDetector::add_note(std::string_view source, std::string_view text) { next_.add_note(source, text); }

std::vector<Finding> OnlineDetector::finish() {
  Engine& e = *engine_;
  {
    std::lock_guard lk(e.mu);
    e.stop = true;
  }
  e.cv.notify_all();
  if (e.thread.joinable()) e.thread.join();
  // The last pass: every window that ended before now (the recording is closed: nothing more comes).
  const int64_t now = e.opt.replay_start_ns ? e.replay_now : monotonic_ns();
  e.take_and_feed();
  e.run_engine(now, e.complete_windows(now + kLateNs), true);
  std::vector<Finding> out;
  for (auto& t : e.tracked) {
    if (t.withdrawn) continue;
    if (t.open) {
      t.open = false;
      e.emit(t, "close");
    }
    Finding f = incident_finding(t.last, e.opt.host);
    f.detector = "incident-online";
    out.push_back(std::move(f));
  }
  if (e.dropped)
    std::cerr << fmt::format("stackscope: --detect: the engine fell behind and skipped {} events and samples\n",
                             e.dropped);
  return out;
}

}  // namespace stackscope::online
