// /proc/diskstats (per block device), /proc/interrupts (per IRQ x CPU) and /proc/softirqs (per type x CPU).
#include <sys/stat.h>

#include <array>

#include "sample/sampler_family.h"

namespace stackscope::procfs {

namespace {

struct DiskField {
  const char* name;
  const char* unit;
  SeriesKind kind;
  uint64_t scale;  // sectors are 512 bytes whatever the device's block size
};
constexpr std::array<DiskField, 17> kDiskSeries = {{
    {"disk.reads", "count", SeriesKind::counter, 1},
    {"disk.reads_merged", "count", SeriesKind::counter, 1},
    {"disk.read_bytes", "bytes", SeriesKind::counter, 512},
    {"disk.read_time", "milliseconds", SeriesKind::counter, 1},
    {"disk.writes", "count", SeriesKind::counter, 1},
    {"disk.writes_merged", "count", SeriesKind::counter, 1},
    {"disk.write_bytes", "bytes", SeriesKind::counter, 512},
    {"disk.write_time", "milliseconds", SeriesKind::counter, 1},
    {"disk.io_in_progress", "count", SeriesKind::gauge, 1},
    {"disk.io_time", "milliseconds", SeriesKind::counter, 1},
    {"disk.io_weighted_time", "milliseconds", SeriesKind::counter, 1},
    {"disk.discards", "count", SeriesKind::counter, 1},
    {"disk.discards_merged", "count", SeriesKind::counter, 1},
    {"disk.discard_bytes", "bytes", SeriesKind::counter, 512},
    {"disk.discard_time", "milliseconds", SeriesKind::counter, 1},
    {"disk.flushes", "count", SeriesKind::counter, 1},
    {"disk.flush_time", "milliseconds", SeriesKind::counter, 1},
}};

class DiskstatsFamily final : public Family {
 public:
  using Family::Family;
  std::string_view name() const override { return "diskstats"; }
  std::string open() override { return file_.open(ctx_.proc("diskstats")) ? "" : file_.error(); }

  void sample(std::vector<Sample>& out) override {
    int64_t t = monotonic_ns();
    auto text = read(file_);
    if (!text) return;
    report("diskstats", parse_diskstats(*text, rows_));
    size_t slot = 0;
    for (const DiskRow& row : rows_) {
      int64_t sub = static_cast<int64_t>(row.major) << 32 | row.minor;
      for (size_t i = 0; i < kDiskSeries.size(); ++i, ++slot) {
        if (!(row.present & (1u << i))) continue;
        auto id = ids_.get(ctx_, slot, row.name, sub, [&]() -> std::optional<SeriesInfo> {
          if (!wanted(row.name)) return std::nullopt;
          const DiskField& f = kDiskSeries[i];
          return series_info(f.name, std::string(row.name), Subsystem::storage, f.unit, f.kind, SeriesCategory::dynamic);
        });
        if (id) out.push_back({*id, t, static_cast<double>(row.values[i]) * static_cast<double>(kDiskSeries[i].scale)});
      }
    }
  }

 private:
  bool wanted(std::string_view dev) const {
    if (!ctx_.options.virtual_disks)
      for (std::string_view p : {"loop", "ram", "zram"})
        if (dev.substr(0, p.size()) == p) return false;
    // Partitions double-count their disk: keep whole devices only (those under /sys/block), when sysfs is there.
    struct stat st{};
    if (::stat(ctx_.sys("block").c_str(), &st) == 0)
      return ::stat(ctx_.sys("block/" + std::string(dev)).c_str(), &st) == 0;
    return true;
  }

  ProcFile file_;
  std::vector<DiskRow> rows_;
  SlotIds ids_;
};

// Shared by /proc/interrupts and /proc/softirqs: a series per (row, CPU) once its count is non-zero, so
// the hundreds of idle IRQ x CPU cells of a large machine never become series.
class IrqTableFamily final : public Family {
 public:
  IrqTableFamily(SamplerContext& c, bool softirqs) : Family(c), softirqs_(softirqs) {}
  std::string_view name() const override { return softirqs_ ? "softirqs" : "interrupts"; }
  // /proc/interrupts costs ~30 us a read here (IRQ x CPU text); softirqs is cheap.
  int min_period_ms() const override { return softirqs_ ? 0 : 250; }
  std::string open() override {
    // /proc/softirqs is one record (proc_create_single); /proc/interrupts one record per IRQ.
    return file_.open(ctx_.proc(softirqs_ ? "softirqs" : "interrupts"), softirqs_) ? "" : file_.error();
  }

  void sample(std::vector<Sample>& out) override {
    int64_t t = monotonic_ns();
    auto text = read(file_);
    if (!text) return;
    report(name(), parse_interrupts(*text, table_));
    size_t ncpu = table_.cpus.size();
    for (size_t r = 0; r < table_.rows.size(); ++r) {
      const IrqRow& row = table_.rows[r];
      for (uint32_t c = 0; c < row.n; ++c) {
        uint64_t v = table_.counts[row.first + c];
        if (v == 0) continue;
        // ERR and MIS have one system-wide count.
        bool system_wide = row.n == 1 && ncpu > 1;
        int cpu = table_.cpus[c];
        auto id = ids_.get(ctx_, r * ncpu + c, row.label, system_wide ? -1 : cpu, [&]() -> std::optional<SeriesInfo> {
          if (declared_ >= ctx_.options.max_irq_series) {
            ctx_.note_once(std::string(name()) + ".cap", "procfs." + std::string(name()),
                           "more than " + std::to_string(ctx_.options.max_irq_series) +
                               " non-zero IRQ x CPU counters: the rest are not recorded");
            return std::nullopt;
          }
          ++declared_;
          return make_info(row, system_wide ? std::string() : "cpu" + std::to_string(cpu));
        });
        if (id) out.push_back({*id, t, static_cast<double>(v)});
      }
    }
  }

 private:
  SeriesInfo make_info(const IrqRow& row, std::string device) const {
    std::string label = sanitize_name(row.label);
    if (softirqs_) {
      Subsystem sub = row.label.substr(0, 4) == "NET_" ? Subsystem::network
                      : row.label == "BLOCK"           ? Subsystem::storage
                                                       : Subsystem::cpu;
      return series_info("softirq." + label, std::move(device), sub, "count", SeriesKind::counter,
                         SeriesCategory::dynamic);
    }
    std::string name = "irq." + label;
    bool numeric = parse_u64(row.label).has_value();
    if (numeric && !row.description.empty()) {
      // The device behind a numbered IRQ is the last word of its description ("... 1-edge virtio1-req.0").
      std::string_view d = row.description;
      size_t sp = d.find_last_of(" \t");
      name += "." + sanitize_name(sp == std::string_view::npos ? d : d.substr(sp + 1));
    }
    bool error_like = row.label == "ERR" || row.label == "MIS" || row.label == "NMI" || row.label == "MCE" ||
                      row.label == "MCP" || row.label == "TRM" || row.label == "THR" || row.label == "SPU" ||
                      row.label == "DFR";
    return series_info(std::move(name), std::move(device), Subsystem::cpu, "count", SeriesKind::counter,
                       error_like ? SeriesCategory::event_counter : SeriesCategory::dynamic);
  }

  bool softirqs_;
  ProcFile file_;
  Interrupts table_;
  SlotIds ids_;
  size_t declared_ = 0;
};

}  // namespace

std::unique_ptr<Family> make_diskstats_family(SamplerContext& c) { return std::make_unique<DiskstatsFamily>(c); }
std::unique_ptr<Family> make_interrupts_family(SamplerContext& c) { return std::make_unique<IrqTableFamily>(c, false); }
std::unique_ptr<Family> make_softirqs_family(SamplerContext& c) { return std::make_unique<IrqTableFamily>(c, true); }

}  // namespace stackscope::procfs
