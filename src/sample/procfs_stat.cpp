// /proc/stat (per-core and total CPU time, context switches, forks, run queue) and /proc/loadavg.
#include "sample/sampler_family.h"

namespace stackscope::procfs {

namespace {

class StatFamily final : public Family {
 public:
  using Family::Family;
  std::string_view name() const override { return "stat"; }
  std::string open() override { return file_.open(ctx_.proc("stat"), true) ? "" : file_.error(); }

  void sample(std::vector<Sample>& out) override {
    int64_t t = monotonic_ns();
    auto text = read(file_);
    if (!text) return;
    report("stat", parse_proc_stat(*text, stat_));
    size_t slot = 0;
    for (const CpuTimesRow& row : stat_.cpus) {
      std::string_view device = row.label == "cpu" ? std::string_view() : row.label;
      for (size_t i = 0; i < kCpuTimeFields.size(); ++i, ++slot) {
        if (!(row.present & (1u << i))) continue;
        auto id = cpu_ids_.get(ctx_, slot, device, 0, [&] {
          return std::optional(series_info("cpu.time." + std::string(kCpuTimeFields[i]), std::string(device),
                                           Subsystem::cpu, "jiffies", SeriesKind::counter, SeriesCategory::dynamic));
        });
        if (id) out.push_back({*id, t, static_cast<double>(row.jiffies[i])});
      }
    }
    struct Scalar {
      const std::optional<uint64_t>& v;
      const char* name;
      Subsystem sub;
      SeriesKind kind;
    };
    const Scalar scalars[] = {
        {stat_.ctxt, "cpu.context_switches", Subsystem::cpu, SeriesKind::counter},
        {stat_.intr, "cpu.interrupts", Subsystem::cpu, SeriesKind::counter},
        {stat_.processes, "proc.forks", Subsystem::software, SeriesKind::counter},
        {stat_.procs_running, "proc.running", Subsystem::software, SeriesKind::gauge},
        {stat_.procs_blocked, "proc.blocked", Subsystem::software, SeriesKind::gauge},
    };
    size_t k = 0;
    for (const Scalar& s : scalars) {
      size_t i = k++;
      if (!s.v) continue;
      if (!scalar_ids_[i])
        scalar_ids_[i] = ctx_.declare(series_info(s.name, "", s.sub, "count", s.kind, SeriesCategory::dynamic));
      out.push_back({scalar_ids_[i], t, static_cast<double>(*s.v)});
    }
  }

 private:
  ProcFile file_;
  ProcStat stat_;
  SlotIds cpu_ids_;
  SeriesId scalar_ids_[5] = {};
};

class LoadavgFamily final : public Family {
 public:
  using Family::Family;
  std::string_view name() const override { return "loadavg"; }
  std::string open() override { return file_.open(ctx_.proc("loadavg"), true) ? "" : file_.error(); }

  void sample(std::vector<Sample>& out) override {
    int64_t t = monotonic_ns();
    auto text = read(file_);
    if (!text) return;
    LoadAvg la;
    report("loadavg", parse_loadavg(*text, la));
    const std::pair<std::optional<double>, const char*> values[] = {
        {la.load1, "cpu.load.1m"},
        {la.load5, "cpu.load.5m"},
        {la.load15, "cpu.load.15m"},
        {la.threads ? std::optional<double>(static_cast<double>(*la.threads)) : std::nullopt, "proc.threads"}};
    for (size_t i = 0; i < 4; ++i) {
      if (!values[i].first) continue;
      if (!ids_[i]) {
        Subsystem sub = i < 3 ? Subsystem::cpu : Subsystem::software;
        ids_[i] = ctx_.declare(series_info(values[i].second, "", sub, "count", SeriesKind::gauge, SeriesCategory::dynamic));
      }
      out.push_back({ids_[i], t, *values[i].first});
    }
  }

 private:
  ProcFile file_;
  SeriesId ids_[4] = {};
};

}  // namespace

std::unique_ptr<Family> make_stat_family(SamplerContext& c) { return std::make_unique<StatFamily>(c); }
std::unique_ptr<Family> make_loadavg_family(SamplerContext& c) { return std::make_unique<LoadavgFamily>(c); }

}  // namespace stackscope::procfs
