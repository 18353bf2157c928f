// cgroup v2 statistics per container: cpu.stat, memory.current, a memory.stat subset and io.stat (summed over
// devices). Only leaf cgroups that hold processes, at most options.max_cgroups of them, re-scanned now and then.
#include <algorithm>
#include <array>
#include <filesystem>
#include <map>

#include "sample/sampler_family.h"

namespace stackscope::procfs {

namespace {

namespace fs = std::filesystem;

struct CgroupField {
  std::string_view key;
  const char* series;
  const char* unit;
  SeriesKind kind;
  SeriesCategory category;
};
constexpr std::array<CgroupField, 6> kCpuFields = {{
    {"usage_usec", "cgroup.cpu.usage", "microseconds", SeriesKind::counter, SeriesCategory::dynamic},
    {"user_usec", "cgroup.cpu.user", "microseconds", SeriesKind::counter, SeriesCategory::dynamic},
    {"system_usec", "cgroup.cpu.system", "microseconds", SeriesKind::counter, SeriesCategory::dynamic},
    {"nr_periods", "cgroup.cpu.periods", "count", SeriesKind::counter, SeriesCategory::dynamic},
    {"nr_throttled", "cgroup.cpu.throttled", "count", SeriesKind::counter, SeriesCategory::event_counter},
    {"throttled_usec", "cgroup.cpu.throttled_time", "microseconds", SeriesKind::counter, SeriesCategory::event_counter},
}};
constexpr std::array<CgroupField, 11> kMemoryFields = {{
    {"anon", "cgroup.memory.anon", "bytes", SeriesKind::gauge, SeriesCategory::dynamic},
    {"file", "cgroup.memory.file", "bytes", SeriesKind::gauge, SeriesCategory::dynamic},
    {"kernel", "cgroup.memory.kernel", "bytes", SeriesKind::gauge, SeriesCategory::dynamic},
    {"shmem", "cgroup.memory.shmem", "bytes", SeriesKind::gauge, SeriesCategory::dynamic},
    {"sock", "cgroup.memory.sock", "bytes", SeriesKind::gauge, SeriesCategory::dynamic},
    {"file_dirty", "cgroup.memory.file_dirty", "bytes", SeriesKind::gauge, SeriesCategory::dynamic},
    {"file_writeback", "cgroup.memory.file_writeback", "bytes", SeriesKind::gauge, SeriesCategory::dynamic},
    {"pgfault", "cgroup.memory.pgfault", "count", SeriesKind::counter, SeriesCategory::dynamic},
    {"pgmajfault", "cgroup.memory.pgmajfault", "count", SeriesKind::counter, SeriesCategory::event_counter},
    {"workingset_refault_anon", "cgroup.memory.refault_anon", "count", SeriesKind::counter, SeriesCategory::event_counter},
    {"workingset_refault_file", "cgroup.memory.refault_file", "count", SeriesKind::counter, SeriesCategory::event_counter},
}};
constexpr std::array<CgroupField, 6> kIoFields = {{
    {"rbytes", "cgroup.io.read_bytes", "bytes", SeriesKind::counter, SeriesCategory::dynamic},
    {"wbytes", "cgroup.io.write_bytes", "bytes", SeriesKind::counter, SeriesCategory::dynamic},
    {"rios", "cgroup.io.reads", "count", SeriesKind::counter, SeriesCategory::dynamic},
    {"wios", "cgroup.io.writes", "count", SeriesKind::counter, SeriesCategory::dynamic},
    {"dbytes", "cgroup.io.discard_bytes", "bytes", SeriesKind::counter, SeriesCategory::dynamic},
    {"dios", "cgroup.io.discards", "count", SeriesKind::counter, SeriesCategory::dynamic},
}};

template <size_t N>
const CgroupField* find_field(const std::array<CgroupField, N>& fields, std::string_view key) {
  for (const CgroupField& f : fields)
    if (f.key == key) return &f;
  return nullptr;
}

bool has_processes(const fs::path& dir) {
  // cgroup.events "populated 1" of a leaf means processes inside; a tiny file, unlike cgroup.procs.
  if (auto ev = read_small_file((dir / "cgroup.events").string(), 4096)) {
    std::vector<KeyValue> kv;
    parse_flat_keyed(*ev, kv);
    for (auto& e : kv)
      if (e.key == "populated") return e.value != 0;
  }
  auto procs = read_small_file((dir / "cgroup.procs").string(), 64);
  return procs && !trim(*procs).empty();
}

class CgroupFamily final : public Family {
 public:
  using Family::Family;
  std::string_view name() const override { return "cgroup"; }

  std::string open() override {
    root_ = ctx_.options.cgroup_root;
    if (root_.empty()) {
      auto mi = read_small_file(ctx_.proc("self/mountinfo"), 4u << 20);
      if (!mi) return "cannot read " + ctx_.proc("self/mountinfo");
      auto mount = find_cgroup2_mount(*mi);
      if (!mount) return "no cgroup v2 hierarchy mounted";
      root_ = std::string(*mount);
    }
    std::error_code ec;
    if (!fs::is_directory(root_, ec)) return root_ + ": not a directory";
    return "";
  }

  void sample(std::vector<Sample>& out) override {
    int64_t now = monotonic_ns();
    if (now >= next_scan_ns_) {
      rescan();
      next_scan_ns_ = now + int64_t{ctx_.options.cgroup_rescan_ms} * 1'000'000;
    }
    for (auto it = groups_.begin(); it != groups_.end();) {
      if (!sample_group(it->first, it->second, out)) it = groups_.erase(it);  // the cgroup went away
      else ++it;
    }
  }

  // Visible for the availability listing: how many cgroups would be sampled.
  size_t cgroups() const { return groups_.size(); }

 private:
  struct Group {
    ProcFile cpu, mem_current, mem_stat, io;
    std::map<const void*, SeriesId> ids;  // by field descriptor (memory.current: &mem_current)
  };

  void rescan() {
    std::vector<std::string> leaves;
    size_t seen_dirs = 0, skipped = 0;
    std::error_code ec;
    fs::recursive_directory_iterator it(root_, fs::directory_options::skip_permission_denied, ec), end;
    // Depth and size bounds: a host with thousands of systemd units must not make each scan expensive.
    for (; !ec && it != end && seen_dirs < 20000; it.increment(ec)) {
      if (it.depth() > 8) {
        it.disable_recursion_pending();
        continue;
      }
      if (!it->is_directory(ec)) continue;
      ++seen_dirs;
      const fs::path& dir = it->path();
      bool leaf = true;
      std::error_code ec2;
      for (auto& child : fs::directory_iterator(dir, ec2))
        if (child.is_directory(ec2)) {
          leaf = false;
          break;
        }
      if (!leaf || !has_processes(dir)) continue;
      std::string rel = fs::relative(dir, root_, ec2).string();
      if (leaves.size() < ctx_.options.max_cgroups) leaves.push_back(rel);
      else ++skipped;
    }
    if (skipped)
      ctx_.note_once("cgroup.cap", "procfs.cgroup",
                     std::to_string(skipped) + " leaf cgroups with processes beyond max_cgroups=" +
                         std::to_string(ctx_.options.max_cgroups) + " are not sampled");
    for (const std::string& rel : leaves) {
      if (groups_.count(rel)) continue;
      Group g;
      std::string dir = root_ + "/" + rel;
      g.cpu.open(dir + "/cpu.stat", true);
      g.mem_current.open(dir + "/memory.current", true);
      g.mem_stat.open(dir + "/memory.stat", true);
      g.io.open(dir + "/io.stat", true);
      if (g.cpu.is_open() || g.mem_current.is_open() || g.io.is_open()) groups_.emplace(rel, std::move(g));
    }
    // Groups no longer leaves with processes stop being sampled.
    for (auto it2 = groups_.begin(); it2 != groups_.end();)
      if (std::find(leaves.begin(), leaves.end(), it2->first) == leaves.end()) it2 = groups_.erase(it2);
      else ++it2;
  }

  SeriesId id_for(Group& g, const std::string& rel, const void* key, const CgroupField& f, Subsystem sub) {
    auto [it, fresh] = g.ids.try_emplace(key, 0);
    if (fresh) it->second = ctx_.declare(series_info(f.series, rel, sub, f.unit, f.kind, f.category, "cgroup"));
    return it->second;
  }

  template <size_t N>
  bool sample_keyed(Group& g, const std::string& rel, ProcFile& file, bool io_format,
                    const std::array<CgroupField, N>& fields, Subsystem sub, std::vector<Sample>& out) {
    if (!file.is_open()) return true;
    int64_t t = monotonic_ns();
    auto text = file.read(1u << 20);
    if (!text) return false;
    report(file.path(), io_format ? parse_cgroup_io_stat(*text, values_) : parse_flat_keyed(*text, values_));
    for (const KeyValue& kv : values_)
      if (const CgroupField* f = find_field(fields, kv.key))
        out.push_back({id_for(g, rel, f, *f, sub), t, static_cast<double>(kv.value)});
    return true;
  }

  bool sample_group(const std::string& rel, Group& g, std::vector<Sample>& out) {
    if (!sample_keyed(g, rel, g.cpu, false, kCpuFields, Subsystem::cpu, out)) return false;
    if (g.mem_current.is_open()) {
      int64_t t = monotonic_ns();
      auto text = g.mem_current.read(4096);
      if (!text) return false;
      if (auto v = parse_sysfs_int(*text); v && *v >= 0) {
        static constexpr CgroupField kCurrent{"", "cgroup.memory.current", "bytes", SeriesKind::gauge,
                                              SeriesCategory::dynamic};
        out.push_back({id_for(g, rel, &kCurrent, kCurrent, Subsystem::memory), t, static_cast<double>(*v)});
      }
    }
    if (!sample_keyed(g, rel, g.mem_stat, false, kMemoryFields, Subsystem::memory, out)) return false;
    return sample_keyed(g, rel, g.io, true, kIoFields, Subsystem::storage, out);
  }

  std::string root_;
  std::map<std::string, Group> groups_;
  std::vector<KeyValue> values_;
  int64_t next_scan_ns_ = 0;
};

}  // namespace

std::unique_ptr<Family> make_cgroup_family(SamplerContext& c) { return std::make_unique<CgroupFamily>(c); }

}  // namespace stackscope::procfs
