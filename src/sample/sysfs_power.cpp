// sysfs sensors: cpufreq (per-core frequency), thermal zones, hwmon chips, RAPL powercap energy counters.
// Each is a set of one-number files found once at start and re-read every tick.
#include <algorithm>
#include <filesystem>

#include "sample/sampler_family.h"

namespace stackscope::procfs {

namespace {

namespace fs = std::filesystem;

struct ValueFile {
  ProcFile file;
  SeriesInfo info;
  double scale = 1;  // kernel unit -> stored unit
  SeriesId id = 0;
};

std::string file_text(const fs::path& p) {
  auto s = read_small_file(p.string(), 4096);
  return s ? std::string(trim(*s)) : std::string();
}

std::vector<fs::path> entries(const std::string& dir, std::string_view prefix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

class SysfsValuesFamily : public Family {
 public:
  using Family::Family;

  std::string open() override {
    files_.clear();
    discover();
    std::erase_if(files_, [](const ValueFile& v) { return !v.file.is_open(); });
    return files_.empty() ? none_reason() : "";
  }

  void sample(std::vector<Sample>& out) override {
    for (ValueFile& v : files_) {
      int64_t t = monotonic_ns();
      auto text = v.file.read(4096);
      if (!text) continue;  // some sensors answer EIO or ENODATA now and then: skip the tick
      auto x = parse_sysfs_int(*text);
      if (!x) {
        ParseReport rep;
        rep.fail(v.file.path() + ": not a number");
        report(name(), rep);
        continue;
      }
      if (!v.id) v.id = ctx_.declare(v.info);
      out.push_back({v.id, t, static_cast<double>(*x) * v.scale});
    }
  }

 protected:
  virtual void discover() = 0;
  virtual std::string none_reason() const = 0;
  void add(const fs::path& path, SeriesInfo info, double scale) {
    ValueFile v;
    if (!v.file.open(path.string(), true)) return;
    // A file that cannot be read now (permission, EIO) would only ever fail: leave it out.
    auto text = v.file.read(4096);
    if (!text || !parse_sysfs_int(*text)) return;
    v.info = std::move(info);
    v.scale = scale;
    files_.push_back(std::move(v));
  }

  std::vector<ValueFile> files_;
};

class CpufreqFamily final : public SysfsValuesFamily {
 public:
  using SysfsValuesFamily::SysfsValuesFamily;
  std::string_view name() const override { return "cpufreq"; }

 private:
  void discover() override {
    auto online = read_small_file(ctx_.sys("devices/system/cpu/online"), 4096);
    auto cpus = online ? parse_cpu_list(*online) : std::nullopt;
    if (!cpus) return;
    for (int c : *cpus) {
      std::string dir = ctx_.sys("devices/system/cpu/cpu" + std::to_string(c) + "/cpufreq/");
      std::error_code ec;
      std::string path = fs::exists(dir + "scaling_cur_freq", ec) ? dir + "scaling_cur_freq" : dir + "cpuinfo_cur_freq";
      add(path, series_info("cpu.freq", "cpu" + std::to_string(c), Subsystem::cpu, "hertz", SeriesKind::gauge,
                            SeriesCategory::dynamic, "sysfs"),
          1000.0);  // kHz
    }
  }
  std::string none_reason() const override { return "no cpufreq in sysfs (virtual machine or driver not loaded)"; }
};

class ThermalFamily final : public SysfsValuesFamily {
 public:
  using SysfsValuesFamily::SysfsValuesFamily;
  std::string_view name() const override { return "thermal"; }

 private:
  void discover() override {
    for (const fs::path& zone : entries(ctx_.sys("class/thermal"), "thermal_zone")) {
      std::string type = sanitize_name(file_text(zone / "type"));
      std::string device = zone.filename().string() + (type.empty() ? "" : ":" + type);
      // Thermal sensors are "static or strictly periodic" in Reveal's terms: kept for cross-host comparison.
      add(zone / "temp", series_info("thermal.temp", device, Subsystem::cpu, "celsius", SeriesKind::gauge,
                                     SeriesCategory::static_value, "sysfs"),
          1e-3);  // millidegrees
    }
  }
  std::string none_reason() const override { return "no thermal zones in sysfs"; }
};

class HwmonFamily final : public SysfsValuesFamily {
 public:
  using SysfsValuesFamily::SysfsValuesFamily;
  std::string_view name() const override { return "hwmon"; }

 private:
  void discover() override {
    struct Kind {
      std::string_view prefix, suffix;
      const char* series;
      const char* unit;
      double scale;
      SeriesCategory category;
    };
    static constexpr Kind kKinds[] = {
        {"temp", "_input", "hwmon.temp", "celsius", 1e-3, SeriesCategory::static_value},
        {"power", "_input", "hwmon.power", "watts", 1e-6, SeriesCategory::dynamic},
        {"power", "_average", "hwmon.power", "watts", 1e-6, SeriesCategory::dynamic},
        {"in", "_input", "hwmon.voltage", "volts", 1e-3, SeriesCategory::static_value},
        {"curr", "_input", "hwmon.current", "amperes", 1e-3, SeriesCategory::dynamic},
        {"fan", "_input", "hwmon.fan", "rpm", 1, SeriesCategory::static_value},
    };
    for (const fs::path& chip : entries(ctx_.sys("class/hwmon"), "hwmon")) {
      std::string chip_name = sanitize_name(file_text(chip / "name"));
      if (chip_name.empty()) chip_name = chip.filename().string();
      Subsystem sub = chip_name.find("nvme") != std::string::npos ? Subsystem::storage
                      : chip_name.find("gpu") != std::string::npos || chip_name == "nouveau" ? Subsystem::gpu
                                                                                            : Subsystem::cpu;
      std::error_code ec;
      std::vector<fs::path> files;
      for (auto& e : fs::directory_iterator(chip, ec)) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) {
        std::string fn = f.filename().string();
        for (const Kind& k : kKinds) {
          if (fn.rfind(k.prefix, 0) != 0 || fn.size() <= k.suffix.size() ||
              fn.compare(fn.size() - k.suffix.size(), k.suffix.size(), k.suffix) != 0)
            continue;
          std::string base = fn.substr(0, fn.size() - k.suffix.size());  // "temp1"
          if (!parse_u64(std::string_view(base).substr(k.prefix.size()))) continue;
          std::string label = sanitize_name(file_text(chip / (base + "_label")));
          add(f, series_info(k.series, chip_name + "/" + (label.empty() ? base : label), sub, k.unit,
                             SeriesKind::gauge, k.category, "sysfs"),
              k.scale);
        }
      }
    }
  }
  std::string none_reason() const override { return "no hwmon sensors in sysfs"; }
};

class RaplFamily final : public SysfsValuesFamily {
 public:
  using SysfsValuesFamily::SysfsValuesFamily;
  std::string_view name() const override { return "rapl"; }

 private:
  void discover() override {
    // intel-rapl:0 (package-0), intel-rapl:0:0 (core), intel-rapl:0:1 (uncore or dram)...
    for (const fs::path& zone : entries(ctx_.sys("class/powercap"), "intel-rapl:")) {
      std::string zname = sanitize_name(file_text(zone / "name"));
      std::string id = zone.filename().string().substr(std::string("intel-rapl:").size());
      Subsystem sub = zname.find("dram") != std::string::npos ? Subsystem::memory : Subsystem::cpu;
      // Energy is a wrapping counter (max_energy_range_uj): derived rates skip the wrap as a reset.
      add(zone / "energy_uj", series_info("power.energy", id + ":" + zname, sub, "microjoules", SeriesKind::counter,
                                          SeriesCategory::dynamic, "sysfs"),
          1.0);
    }
  }
  std::string none_reason() const override {
    return "no RAPL powercap zones in sysfs (not Intel/AMD RAPL, virtual machine, or energy_uj not readable)";
  }
};

}  // namespace

std::unique_ptr<Family> make_cpufreq_family(SamplerContext& c) { return std::make_unique<CpufreqFamily>(c); }
std::unique_ptr<Family> make_thermal_family(SamplerContext& c) { return std::make_unique<ThermalFamily>(c); }
std::unique_ptr<Family> make_hwmon_family(SamplerContext& c) { return std::make_unique<HwmonFamily>(c); }
std::unique_ptr<Family> make_rapl_family(SamplerContext& c) { return std::make_unique<RaplFamily>(c); }

}  // namespace stackscope::procfs
