// perf_event_open counters per CPU: hardware (cycles, instructions, cache and branch misses, stalls) where a PMU
// exists, software (context switches, migrations, page faults) everywhere. Events are opened in groups so one
// read() per group and CPU returns all of them, scheduled together (their ratios, IPC say, stay meaningful).
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "sample/sampler_family.h"

namespace stackscope::procfs {

namespace {

struct PerfEventDef {
  uint32_t type;
  uint64_t config;
  const char* series;
  Subsystem subsystem;
  SeriesCategory category;
};

// Two hardware groups: a PMU has few general counters, and a group that cannot fit is never scheduled.
const std::vector<std::vector<PerfEventDef>> kHardwareGroups = {
    {{PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, "perf.cycles", Subsystem::cpu, SeriesCategory::dynamic},
     {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, "perf.instructions", Subsystem::cpu, SeriesCategory::dynamic},
     {PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS, "perf.branch_instructions", Subsystem::cpu,
      SeriesCategory::dynamic},
     {PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, "perf.branch_misses", Subsystem::cpu, SeriesCategory::dynamic}},
    {{PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES, "perf.cache_references", Subsystem::memory,
      SeriesCategory::dynamic},
     {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, "perf.cache_misses", Subsystem::memory, SeriesCategory::dynamic},
     {PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_FRONTEND, "perf.stalled_cycles_frontend", Subsystem::cpu,
      SeriesCategory::dynamic},
     {PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_BACKEND, "perf.stalled_cycles_backend", Subsystem::cpu,
      SeriesCategory::dynamic}},
};
const std::vector<std::vector<PerfEventDef>> kSoftwareGroups = {
    {{PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, "perf.context_switches", Subsystem::cpu,
      SeriesCategory::dynamic},
     {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, "perf.cpu_migrations", Subsystem::cpu, SeriesCategory::dynamic},
     {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, "perf.page_faults", Subsystem::memory, SeriesCategory::dynamic},
     {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ, "perf.major_faults", Subsystem::memory,
      SeriesCategory::event_counter}},
};

int perf_open(const PerfEventDef& def, int cpu, int group_fd) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = def.type;
  attr.config = def.config;
  attr.read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  attr.disabled = group_fd < 0 ? 1 : 0;  // the leader starts the whole group once every member is in
  return static_cast<int>(::syscall(SYS_perf_event_open, &attr, -1, cpu, group_fd, PERF_FLAG_FD_CLOEXEC));
}

std::string perf_error(int err, int cpu) {
  std::string base = "perf_event_open on cpu" + std::to_string(cpu) + ": " + std::strerror(err);
  if (err == ENOENT || err == ENODEV || err == EOPNOTSUPP) return "no hardware PMU (" + base + ")";
  if (err == EACCES || err == EPERM) {
    auto p = read_small_file("/proc/sys/kernel/perf_event_paranoid", 64);
    return "not permitted (" + base + "; perf_event_paranoid=" + (p ? std::string(trim(*p)) : "?") +
           ", needs root or CAP_PERFMON)";
  }
  return base;
}

class PerfFamily final : public Family {
 public:
  PerfFamily(SamplerContext& c, bool hardware) : Family(c), hardware_(hardware) {}
  ~PerfFamily() override { close_all(); }
  std::string_view name() const override { return hardware_ ? "perf_hw" : "perf_sw"; }

  std::string open() override {
    close_all();
    auto online = read_small_file(ctx_.sys("devices/system/cpu/online"), 4096);
    auto cpus = online ? parse_cpu_list(*online) : std::nullopt;
    if (!cpus || cpus->empty()) return "cannot read the online CPU list";
    const auto& defs = hardware_ ? kHardwareGroups : kSoftwareGroups;
    std::string first_error;
    for (int cpu : *cpus) {
      for (const auto& group_defs : defs) {
        Group g;
        g.cpu = cpu;
        for (const PerfEventDef& def : group_defs) {
          int fd = perf_open(def, cpu, g.leader_fd);
          if (fd < 0) {
            // An event this CPU lacks (stalled cycles on many Intel parts) is left out; the rest go on.
            if (first_error.empty()) first_error = perf_error(errno, cpu);
            continue;
          }
          if (g.leader_fd < 0) g.leader_fd = fd;
          else g.member_fds.push_back(fd);
          g.members.push_back(&def);
        }
        if (g.leader_fd < 0) continue;
        ::ioctl(g.leader_fd, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP);
        g.ids.assign(g.members.size(), 0);
        g.last.assign(g.members.size(), 0);
        groups_.push_back(std::move(g));
      }
    }
    if (groups_.empty()) return first_error.empty() ? "no events opened" : first_error;
    return "";
  }

  void sample(std::vector<Sample>& out) override {
    // One timestamp for every group and CPU of a tick, so that ratios across groups (stalls / cycles) and
    // totals across CPUs join on equal times.
    int64_t t = monotonic_ns();
    for (Group& g : groups_) {
      buf_.resize(8 * (3 + g.members.size()));
      ssize_t n = ::read(g.leader_fd, buf_.data(), buf_.size());
      if (n < 0) {
        ParseReport rep;
        rep.fail(std::string("read: ") + std::strerror(errno));
        report(name(), rep);
        continue;
      }
      auto rep = parse_perf_group_read(std::span<const uint8_t>(buf_.data(), static_cast<size_t>(n)), read_);
      report(name(), rep);
      if (!rep.ok() || read_.values.size() != g.members.size() || read_.time_running == 0) continue;
      // Multiplexed: scale to the enabled time (perf stat's estimate); kept non-decreasing.
      double scale = read_.time_running < read_.time_enabled
                         ? static_cast<double>(read_.time_enabled) / static_cast<double>(read_.time_running)
                         : 1.0;
      for (size_t i = 0; i < g.members.size(); ++i) {
        if (!g.ids[i]) {
          const PerfEventDef& d = *g.members[i];
          g.ids[i] = ctx_.declare(series_info(d.series, "cpu" + std::to_string(g.cpu), d.subsystem, "count",
                                              SeriesKind::counter, d.category, "perf"));
        }
        double v = std::round(static_cast<double>(read_.values[i]) * scale);
        g.last[i] = std::max(g.last[i], v);
        out.push_back({g.ids[i], t, g.last[i]});
      }
    }
  }

 private:
  struct Group {
    int cpu = 0;
    int leader_fd = -1;
    std::vector<int> member_fds;
    std::vector<const PerfEventDef*> members;
    std::vector<SeriesId> ids;
    std::vector<double> last;
  };
  void close_all() {
    for (Group& g : groups_) {
      for (int fd : g.member_fds) ::close(fd);
      if (g.leader_fd >= 0) ::close(g.leader_fd);
    }
    groups_.clear();
  }

  bool hardware_;
  std::vector<Group> groups_;
  std::vector<uint8_t> buf_;
  PerfGroupRead read_;
};

}  // namespace

std::unique_ptr<Family> make_perf_hw_family(SamplerContext& c) { return std::make_unique<PerfFamily>(c, true); }
std::unique_ptr<Family> make_perf_sw_family(SamplerContext& c) { return std::make_unique<PerfFamily>(c, false); }

}  // namespace stackscope::procfs
