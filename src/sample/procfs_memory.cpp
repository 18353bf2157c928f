// /proc/meminfo, /proc/vmstat and /proc/pressure/{cpu,memory,io} (PSI).
#include <unistd.h>

#include <algorithm>
#include <array>

#include "sample/sampler_family.h"

namespace stackscope::procfs {

namespace {

bool in(std::string_view key, std::initializer_list<std::string_view> set) {
  return std::find(set.begin(), set.end(), key) != set.end();
}

class MeminfoFamily final : public Family {
 public:
  using Family::Family;
  std::string_view name() const override { return "meminfo"; }
  std::string open() override { return file_.open(ctx_.proc("meminfo"), true) ? "" : file_.error(); }

  void sample(std::vector<Sample>& out) override {
    int64_t t = monotonic_ns();
    auto text = read(file_);
    if (!text) return;
    report("meminfo", parse_meminfo(*text, values_));
    for (size_t i = 0; i < values_.size(); ++i) {
      const KeyValue& kv = values_[i];
      auto id = ids_.get(ctx_, i, kv.key, 0, [&] {
        // Sizes fixed at boot: kept for cross-host comparison, out of single-host detection (Reveal §4.2).
        bool fixed = in(kv.key, {"MemTotal", "SwapTotal", "Hugepagesize", "HugePages_Total", "VmallocTotal",
                                 "CmaTotal", "DirectMap4k", "DirectMap2M", "DirectMap1G", "Hugetlb"});
        return std::optional(series_info("mem." + sanitize_name(kv.key), "", Subsystem::memory,
                                         kv.scaled_kb ? "bytes" : "count",
                                         fixed ? SeriesKind::static_value : SeriesKind::gauge,
                                         fixed ? SeriesCategory::static_value : SeriesCategory::dynamic));
      });
      if (id) out.push_back({*id, t, static_cast<double>(kv.value)});
    }
  }

 private:
  ProcFile file_;
  std::vector<KeyValue> values_;
  SlotIds ids_;
};

// The curated /proc/vmstat subset: reclaim, swap, faults, dirty data, THP and compaction (Reveal §4.1).
constexpr std::array<std::string_view, 12> kVmstatGauges = {
    "nr_free_pages", "nr_dirty", "nr_writeback", "nr_anon_pages", "nr_file_pages", "nr_shmem", "nr_mapped",
    "nr_slab_reclaimable", "nr_slab_unreclaimable", "nr_anon_transparent_hugepages", "nr_unevictable",
    "nr_mlock"};
constexpr std::array<std::string_view, 27> kVmstatCounters = {
    "pgpgin", "pgpgout", "pswpin", "pswpout", "pgfault", "pgmajfault", "pgsteal_kswapd", "pgsteal_direct",
    "pgscan_kswapd", "pgscan_direct", "allocstall_normal", "allocstall_movable", "allocstall_dma32", "oom_kill",
    "compact_stall", "compact_fail", "thp_fault_alloc", "thp_fault_fallback", "workingset_refault_anon",
    "workingset_refault_file", "numa_hint_faults", "numa_pages_migrated", "pgmigrate_success", "nr_dirtied",
    "nr_written", "pgrotated", "kswapd_low_wmark_hit_quickly"};

class VmstatFamily final : public Family {
 public:
  using Family::Family;
  std::string_view name() const override { return "vmstat"; }
  std::string open() override {
    page_size_ = static_cast<uint64_t>(std::max(1L, ::sysconf(_SC_PAGESIZE)));
    return file_.open(ctx_.proc("vmstat")) ? "" : file_.error();
  }

  void sample(std::vector<Sample>& out) override {
    int64_t t = monotonic_ns();
    auto text = read(file_);
    if (!text) return;
    report("vmstat", parse_flat_keyed(*text, values_));
    for (size_t i = 0; i < values_.size(); ++i) {
      const KeyValue& kv = values_[i];
      bool gauge = kv.key.substr(0, 3) == "nr_" && kv.key != "nr_dirtied" && kv.key != "nr_written";
      auto id = ids_.get(ctx_, i, kv.key, 0, [&]() -> std::optional<SeriesInfo> {
        bool wanted = ctx_.options.vmstat_all ||
                      std::find(kVmstatGauges.begin(), kVmstatGauges.end(), kv.key) != kVmstatGauges.end() ||
                      std::find(kVmstatCounters.begin(), kVmstatCounters.end(), kv.key) != kVmstatCounters.end();
        if (!wanted) return std::nullopt;
        bool dynamic_counter = kv.key == "pgpgin" || kv.key == "pgpgout" || kv.key == "pgfault";
        // pgpgin/pgpgout count KiB read from / written to block devices: storage traffic, not memory.
        bool block_io = kv.key == "pgpgin" || kv.key == "pgpgout";
        return series_info("vm." + sanitize_name(kv.key), "", block_io ? Subsystem::storage : Subsystem::memory,
                           gauge ? "bytes" : "count",
                           gauge ? SeriesKind::gauge : SeriesKind::counter,
                           gauge || dynamic_counter ? SeriesCategory::dynamic : SeriesCategory::event_counter);
      });
      // nr_* gauges are page counts: stored in bytes.
      if (id) out.push_back({*id, t, static_cast<double>(gauge ? kv.value * page_size_ : kv.value)});
    }
  }

 private:
  ProcFile file_;
  std::vector<KeyValue> values_;
  SlotIds ids_;
  uint64_t page_size_ = 4096;
};

class PressureFamily final : public Family {
 public:
  using Family::Family;
  std::string_view name() const override { return "pressure"; }
  std::string open() override {
    std::string why;
    for (size_t r = 0; r < kResources.size(); ++r)
      if (!files_[r].open(ctx_.proc("pressure/" + std::string(kResources[r])), true)) why = files_[r].error();
    bool any = std::any_of(files_.begin(), files_.end(), [](const ProcFile& f) { return f.is_open(); });
    return any ? "" : why + " (kernel without PSI, or psi=0)";
  }

  void sample(std::vector<Sample>& out) override {
    for (size_t r = 0; r < kResources.size(); ++r) {
      if (!files_[r].is_open()) continue;
      int64_t t = monotonic_ns();
      auto text = read(files_[r]);
      if (!text) continue;
      report(kResources[r], parse_pressure(*text, lines_));
      for (size_t l = 0; l < lines_.size() && l < 2; ++l) {
        const PressureLine& p = lines_[l];
        std::string base = "pressure." + std::string(kResources[r]) + ".";
        Subsystem sub = r == 0 ? Subsystem::cpu : r == 1 ? Subsystem::memory : Subsystem::storage;
        size_t slot = l * 2;
        if (p.avg10) {
          auto id = ids_[r].get(ctx_, slot, p.kind, 0, [&] {
            return std::optional(series_info(base + std::string(p.kind) + ".avg10", "", sub, "ratio",
                                             SeriesKind::gauge, SeriesCategory::dynamic));
          });
          if (id) out.push_back({*id, t, *p.avg10 / 100.0});
        }
        if (p.total) {
          auto id = ids_[r].get(ctx_, slot + 1, p.kind, 0, [&] {
            return std::optional(series_info(base + std::string(p.kind) + ".total", "", sub, "microseconds",
                                             SeriesKind::counter, SeriesCategory::dynamic));
          });
          if (id) out.push_back({*id, t, static_cast<double>(*p.total)});
        }
      }
    }
  }

 private:
  static constexpr std::array<std::string_view, 3> kResources = {"cpu", "memory", "io"};
  std::array<ProcFile, 3> files_;
  std::array<SlotIds, 3> ids_;
  std::vector<PressureLine> lines_;
};

}  // namespace

std::unique_ptr<Family> make_meminfo_family(SamplerContext& c) { return std::make_unique<MeminfoFamily>(c); }
std::unique_ptr<Family> make_vmstat_family(SamplerContext& c) { return std::make_unique<VmstatFamily>(c); }
std::unique_ptr<Family> make_pressure_family(SamplerContext& c) { return std::make_unique<PressureFamily>(c); }

}  // namespace stackscope::procfs
