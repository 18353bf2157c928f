// Internals of the procfs sampler: one Family per kernel source (stat, meminfo, netdev...). A family opens its
// files once, then on every tick preads them, runs its pure parser and appends samples. Series are declared
// lazily (the set of CPUs, interfaces and disks is known only from the files) and cached by position.
#pragma once
#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "model/clock.h"
#include "model/series.h"
#include "model/sink.h"
#include "sample/procfs_parsers.h"
#include "sample/procfs_sampler.h"

namespace stackscope::procfs {

struct SamplerContext {
  TelemetrySink* sink = nullptr;  // null while only probing availability
  std::string host;
  ProcfsSamplerOptions options;
  size_t series_declared = 0;
  std::set<std::string, std::less<>> noted;  // one note per (family, kind of problem)

  // The job's processes: options.traced_pids, then those the recorder announces (add_pid, another thread).
  void add_traced_pid(uint32_t pid) {
    std::lock_guard lk(traced_mu_);
    if (std::find(traced_.begin(), traced_.end(), pid) == traced_.end()) traced_.push_back(pid);
  }
  std::vector<uint32_t> traced_pids() const {
    std::lock_guard lk(traced_mu_);
    return traced_;
  }
  // Replaces the set; traced_generation() then changes, so that a family drops what it inferred from the old one.
  void set_traced_pids(std::vector<uint32_t> pids) {
    std::lock_guard lk(traced_mu_);
    traced_ = std::move(pids);
    ++generation_;
  }
  uint64_t traced_generation() const {
    std::lock_guard lk(traced_mu_);
    return generation_;
  }

  std::string proc(std::string_view rel) const { return options.proc_root + "/" + std::string(rel); }
  std::string sys(std::string_view rel) const { return options.sys_root + "/" + std::string(rel); }
  // Stamps host and declares; 0 when there is no sink.
  SeriesId declare(SeriesInfo info);
  // A note in the recording, once per `key`.
  void note_once(std::string_view key, std::string_view source, std::string_view text);

 private:
  mutable std::mutex traced_mu_;
  std::vector<uint32_t> traced_;
  uint64_t generation_ = 0;
};

// Series ids cached by position in a parsed file: a steady-state tick costs one short compare per value.
// A position whose identity (tag, sub) changed (an interface appeared, a CPU went offline) is declared anew.
class SlotIds {
 public:
  template <class Make>
  std::optional<SeriesId> get(SamplerContext& ctx, size_t slot, std::string_view tag, int64_t sub, Make&& make) {
    if (slot >= slots_.size()) slots_.resize(slot + 1);
    Slot& s = slots_[slot];
    if (!s.valid || s.sub != sub || s.tag != tag) {
      s.tag.assign(tag);
      s.sub = sub;
      s.valid = true;
      std::optional<SeriesInfo> info = make();
      s.skip = !info.has_value();
      if (info) s.id = ctx.declare(std::move(*info));
    }
    if (s.skip) return std::nullopt;
    return s.id;
  }

 private:
  struct Slot {
    std::string tag;
    int64_t sub = 0;
    SeriesId id = 0;
    bool valid = false, skip = false;
  };
  std::vector<Slot> slots_;
};

class Family {
 public:
  explicit Family(SamplerContext& ctx) : ctx_(ctx) {}
  virtual ~Family() = default;
  virtual std::string_view name() const = 0;
  // Opens what it reads. Returns "" when it can sample, else one line saying why not.
  virtual std::string open() = 0;
  // Reads once and appends samples to `out`.
  virtual void sample(std::vector<Sample>& out) = 0;
  // Shortest period worth reading at (0: every tick). Error/event counters that the kernel formats at some cost
  // are read less often: they are cumulative, so window sums (Reveal §4.2) come out the same.
  virtual int min_period_ms() const { return 0; }

 protected:
  // The first parse problem of each file becomes one note; later ones of the same file are silent.
  void report(std::string_view file, const ParseReport& rep);
  // Reads `f` (kept open) or notes the failure once; nullopt when it could not be read.
  std::optional<std::string_view> read(ProcFile& f);
  SamplerContext& ctx_;
};

struct FamilyDef {
  std::string_view name;
  std::string_view description;
  std::unique_ptr<Family> (*make)(SamplerContext&);
};
// Every family, in sampling order.
const std::vector<FamilyDef>& family_defs();

// Factories, one per family file.
std::unique_ptr<Family> make_stat_family(SamplerContext&);
std::unique_ptr<Family> make_loadavg_family(SamplerContext&);
std::unique_ptr<Family> make_meminfo_family(SamplerContext&);
std::unique_ptr<Family> make_vmstat_family(SamplerContext&);
std::unique_ptr<Family> make_pressure_family(SamplerContext&);
std::unique_ptr<Family> make_netdev_family(SamplerContext&);
std::unique_ptr<Family> make_netproto_family(SamplerContext&);
std::unique_ptr<Family> make_diskstats_family(SamplerContext&);
std::unique_ptr<Family> make_interrupts_family(SamplerContext&);
std::unique_ptr<Family> make_softirqs_family(SamplerContext&);
std::unique_ptr<Family> make_cgroup_family(SamplerContext&);
std::unique_ptr<Family> make_cpufreq_family(SamplerContext&);
std::unique_ptr<Family> make_thermal_family(SamplerContext&);
std::unique_ptr<Family> make_hwmon_family(SamplerContext&);
std::unique_ptr<Family> make_rapl_family(SamplerContext&);
std::unique_ptr<Family> make_perf_hw_family(SamplerContext&);
std::unique_ptr<Family> make_perf_sw_family(SamplerContext&);
std::unique_ptr<Family> make_process_cpu_family(SamplerContext&);

}  // namespace stackscope::procfs
