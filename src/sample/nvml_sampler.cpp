#include "sample/nvml_sampler.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <optional>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "model/clock.h"
#include "sample/procfs_file.h"
#include "sample/procfs_parsers.h"
#include "model/process.h"

namespace stackscope {

namespace {

// The few NVML types and entry points we use, declared from the public nvml.h (we never include it: no
// build-time dependency on the CUDA toolkit). Enums are C ints; structs match the header's layout.
namespace nvml {
using Return = int;
constexpr Return kSuccess = 0, kNotSupported = 3, kNoPermission = 4, kNotFound = 6, kInsufficientSize = 7,
                 kTimeout = 10, kFunctionNotFound = 13;
using Device = struct nvmlDevice_st*;
using EventSet = struct nvmlEventSet_st*;
struct Utilization {
  unsigned int gpu, memory;  // percent
};
struct Memory {
  unsigned long long total, free, used;  // bytes; v1's used includes the driver's reservation
};
struct MemoryV2 {  // nvmlMemory_v2_t: used excludes the reservation, as nvidia-smi shows it
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
constexpr unsigned int kMemoryV2Version = static_cast<unsigned int>(sizeof(MemoryV2)) | (2u << 24);
union Value {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  unsigned short usVal;
};
enum ValueType { kDouble = 0, kUInt = 1, kULong = 2, kULongLong = 3, kSLongLong = 4, kSInt = 5, kUShort = 6 };
struct FieldValue {
  unsigned int fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType;
  Return nvmlReturn;
  Value value;
};
struct ProcessUtilizationSample {
  unsigned int pid;
  unsigned long long timeStamp;  // CPU timestamp, microseconds
  unsigned int smUtil, memUtil, encUtil, decUtil;  // percent
};
struct ProcessInfo {  // nvmlProcessInfo_t (v2 layout, used by the _v2 and _v3 queries)
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
struct EventData {  // nvmlEventData_t as filled by nvmlEventSetWait_v2
  Device device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
};
constexpr unsigned long long kEventTypeXidCriticalError = 0x8;
constexpr unsigned long long kValueNotAvailable = ~0ull;
constexpr int kTemperatureGpu = 0;
constexpr int kClockSm = 1, kClockMem = 2;
constexpr int kPcieTxBytes = 0, kPcieRxBytes = 1;  // KB/s
constexpr int kErrorCorrected = 0, kErrorUncorrected = 1, kVolatileEcc = 0;
constexpr unsigned int kFieldPcieReplayCounter = 94;
constexpr unsigned int kFieldNvlinkDataTx = 138, kFieldNvlinkDataRx = 139;  // KiB, scopeId UINT_MAX: all links
constexpr unsigned int kFieldPcieCountTx = 197, kFieldPcieCountRx = 198;     // bytes since boot (R525+)
// Clock event (throttle) reasons.
constexpr unsigned long long kSwPowerCap = 0x4, kHwSlowdown = 0x8, kSwThermal = 0x20, kHwThermal = 0x40,
                             kHwPowerBrake = 0x80;

struct Api {
  Return (*Init)() = nullptr;
  Return (*Shutdown)() = nullptr;
  const char* (*ErrorString)(Return) = nullptr;
  Return (*DeviceGetCount)(unsigned int*) = nullptr;
  Return (*DeviceGetHandleByIndex)(unsigned int, Device*) = nullptr;
  Return (*DeviceGetName)(Device, char*, unsigned int) = nullptr;
  Return (*DeviceGetUtilizationRates)(Device, Utilization*) = nullptr;
  Return (*DeviceGetMemoryInfo)(Device, Memory*) = nullptr;
  Return (*DeviceGetMemoryInfoV2)(Device, MemoryV2*) = nullptr;
  Return (*DeviceGetPowerUsage)(Device, unsigned int*) = nullptr;                  // milliwatts
  Return (*DeviceGetTotalEnergyConsumption)(Device, unsigned long long*) = nullptr;  // millijoules
  Return (*DeviceGetTemperature)(Device, int, unsigned int*) = nullptr;
  Return (*DeviceGetClockInfo)(Device, int, unsigned int*) = nullptr;  // MHz
  Return (*DeviceGetPcieThroughput)(Device, int, unsigned int*) = nullptr;
  Return (*DeviceGetFieldValues)(Device, int, FieldValue*) = nullptr;
  Return (*DeviceGetClockReasons)(Device, unsigned long long*) = nullptr;
  Return (*DeviceGetTotalEccErrors)(Device, int, int, unsigned long long*) = nullptr;
  Return (*DeviceGetProcessUtilization)(Device, ProcessUtilizationSample*, unsigned int*, unsigned long long) = nullptr;
  Return (*DeviceGetComputeRunningProcesses)(Device, unsigned int*, ProcessInfo*) = nullptr;
  Return (*EventSetCreate)(EventSet*) = nullptr;
  Return (*DeviceRegisterEvents)(Device, unsigned long long, EventSet) = nullptr;
  Return (*EventSetWait)(EventSet, EventData*, unsigned int) = nullptr;
  Return (*EventSetFree)(EventSet) = nullptr;
};
}  // namespace nvml

// One query of one GPU. Unsupported ones are switched off for that GPU for the rest of the run.
enum Probe {
  kUtil, kMemory, kPower, kEnergy, kTemp, kClockSm, kClockMem, kPcieTx, kPcieRx, kPcieReplay, kNvlinkTx, kNvlinkRx,
  kThrottle, kEccCorrected, kEccUncorrected, kProcUtil, kProcMem, kPcieTxCount, kPcieRxCount, kProbeCount
};
constexpr const char* kProbeNames[kProbeCount] = {
    "utilization", "memory info", "power", "energy", "temperature", "SM clock", "memory clock", "PCIe TX throughput",
    "PCIe RX throughput", "PCIe replay counter", "NVLink TX", "NVLink RX", "clock throttle reasons",
    "ECC corrected", "ECC uncorrected", "process utilization", "process memory", "PCIe TX byte counter",
    "PCIe RX byte counter"};

struct Gpu {
  unsigned int index = 0;
  nvml::Device handle = nullptr;
  std::string device;  // "gpu0"
  bool off[kProbeCount] = {};
  std::set<std::pair<int, nvml::Return>> noted;  // (probe, error) already reported
  unsigned long long last_proc_sample_us = 0;
  double mem_total = -1;
  // The PCIe byte counters' last reading (t ns, bytes) per direction, for the rate between two readings.
  std::optional<std::pair<int64_t, unsigned long long>> pcie_count[2];
  bool pcie_counted = false;  // the byte counters answer: their rates replace the 20 ms throughput query
  std::optional<unsigned int> running;  // processes in the last running-process list (nullopt: unknown)
  size_t index_in_list = 0;   // position among the GPUs sampled (a GPU without a handle is skipped)
};

class NvmlSampler final : public Collector {
 public:
  explicit NvmlSampler(NvmlSamplerOptions o) : opt_(std::move(o)) {}
  ~NvmlSampler() override { stop(); }

  std::string name() const override { return "nvml"; }
  Layer layer() const override { return Layer::nvml; }

  CollectorStatus start(TelemetrySink& sink, const CollectorOptions& options) override {
    if (running_) return {true, "already running"};
    sink_ = &sink;
    host_ = options.host;
    interval_ms_ = opt_.interval_ms > 0 ? opt_.interval_ms : (options.interval_ms > 0 ? options.interval_ms : 100);
    std::string why;
    if (!open_library(why)) return unavailable(why);
    unsigned int count = 0;
    if (nvml::Return r = api_.DeviceGetCount(&count); r != nvml::kSuccess)
      return unavailable("nvmlDeviceGetCount failed: " + error(r));
    std::string names;
    for (unsigned int i = 0; i < count; ++i) {
      Gpu g;
      g.index = i;
      g.device = "gpu" + std::to_string(i);
      if (nvml::Return r = api_.DeviceGetHandleByIndex(i, &g.handle); r != nvml::kSuccess) {
        note(g.device + ": no handle (" + error(r) + "), skipped");
        continue;
      }
      char buf[96] = {};
      if (api_.DeviceGetName && api_.DeviceGetName(g.handle, buf, sizeof buf) == nvml::kSuccess)
        names += (names.empty() ? "" : ", ") + g.device + " " + buf;
      switch_off_missing(g);
      g.index_in_list = gpus_.size();
      gpus_.push_back(std::move(g));
    }
    if (gpus_.empty()) return unavailable("NVML found no GPU");
    slow_ns_ = static_cast<int64_t>(std::max(opt_.slow_interval_ms, 1)) * 1'000'000;
    process_ns_ = static_cast<int64_t>(std::max(opt_.process_interval_ms, 1)) * 1'000'000;
    idle_slow_ns_ = static_cast<int64_t>(std::max(opt_.idle_slow_interval_ms, 1)) * 1'000'000;
    note(fmt::format("sampling {} GPU(s) every {} ms{} (energy, memory clock, ECC and field values at most every {} "
                     "ms{}; per-process queries at most every {} ms, process utilization only on a GPU with a running "
                     "process): {}",
                     gpus_.size(), interval_ms_, opt_.live_interval_ms ? " or as asked while running" : "",
                     opt_.slow_interval_ms,
                     opt_.live_idle ? fmt::format(", every {} ms while the node is idle (no job traced), when a GPU "
                                                  "without processes gets no PCIe throughput query either",
                                                  opt_.idle_slow_interval_ms)
                                    : std::string(),
                     opt_.process_interval_ms, names));
    running_ = true;
    stopping_ = false;
    sampler_ = std::thread([this] {
      name_this_thread("ss-nvml");
      sample_loop();
    });
    if (opt_.xid_events) start_xid_watch();
    return {true, "NVML: " + std::to_string(gpus_.size()) + " GPU(s)"};
  }

  void stop() override {
    if (!running_) return;
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (sampler_.joinable()) sampler_.join();
    if (xid_.joinable()) xid_.join();
    note_query_costs();
    if (event_set_ && api_.EventSetFree) api_.EventSetFree(event_set_);
    event_set_ = nullptr;
    if (api_.Shutdown) api_.Shutdown();
    // The library stays loaded: the driver's NVML may keep helper threads alive past nvmlShutdown.
    running_ = false;
  }

 private:
  CollectorStatus unavailable(const std::string& why) {
    std::string msg = "NVML unavailable (" + why + "): no GPU telemetry in this recording";
    if (!announced_) sink_->add_note("nvml", msg);  // once, however often start() is tried
    announced_ = true;
    return {false, msg};
  }

  void note(const std::string& text) { sink_->add_note("nvml", text); }

  // Where the sampling thread's time goes, by group of queries: the recorder's NVML thread can take 6.2 s of CPU
  // in 82 s on one H100, the largest part of the recorder's own cost, with no breakdown to act on.
  enum Phase {
    kPhaseReadings, kPhaseSlowReadings, kPhaseFields, kPhasePcieQuery, kPhaseProcMem, kPhaseProcUtil, kPhaseNames,
    kPhaseCount
  };
  struct PhaseCost {
    double wall_ns = 0, cpu_ns = 0;
  };
  // Rounds and their cost by schedule, told apart in the note: the agent's node sampler spends most of its life on
  // the idle one and a job's minutes on the other, and an average over both would describe neither.
  enum Schedule { kScheduleJob, kScheduleIdle, kScheduleCount };
  struct ScheduleCost {
    PhaseCost phase[kPhaseCount];
    size_t rounds = 0;
    int min_interval_ms = INT_MAX, max_interval_ms = 0;  // the periods its rounds ran at (live_interval_ms)
    size_t proc_reads = 0, proc_util_reads = 0;  // GPU reads of the per-process group; of them with utilization
  };
  ScheduleCost cost_[kScheduleCount];
  Schedule schedule_ = kScheduleJob;  // this round's (sampler thread only)
  static int64_t thread_cpu_ns() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }
  struct PhaseClock {  // charges the time since the last mark to a phase
    int64_t wall = monotonic_ns(), cpu = thread_cpu_ns();
    void mark(PhaseCost& c) {
      const int64_t w = monotonic_ns(), u = thread_cpu_ns();
      c.wall_ns += static_cast<double>(w - wall);
      c.cpu_ns += static_cast<double>(u - cpu);
      wall = w;
      cpu = u;
    }
  };
  void note_query_costs() {
    for (int s = 0; s < kScheduleCount; ++s) note_query_costs(static_cast<Schedule>(s));
  }
  void note_query_costs(Schedule which) {
    const ScheduleCost& c = cost_[which];
    if (c.rounds == 0) return;
    static constexpr const char* kPhaseNames[kPhaseCount] = {
        "readings", "slow readings", "field values", "PCIe throughput (20 ms each)", "running processes",
        "process utilization", "process names"};
    double wall = 0, cpu = 0;
    for (auto& p : c.phase) {
      wall += p.wall_ns;
      cpu += p.cpu_ns;
    }
    const double n = static_cast<double>(c.rounds);
    std::string by;
    for (int i = 0; i < kPhaseCount; ++i)
      if (c.phase[i].wall_ns > 0)
        by += fmt::format("{}{} {:.2f} / {:.2f}", by.empty() ? "" : ", ", kPhaseNames[i], c.phase[i].wall_ns / n / 1e6,
                          c.phase[i].cpu_ns / n / 1e6);
    const std::string every = c.min_interval_ms == c.max_interval_ms
                                  ? fmt::format("every {} ms", c.min_interval_ms)
                                  : fmt::format("every {}-{} ms", c.min_interval_ms, c.max_interval_ms);
    const std::string label = !opt_.live_idle ? std::string()
                              : which == kScheduleIdle ? ", idle schedule (no job traced)"
                                                       : ", job schedule (a job traced)";
    note(fmt::format("sampling round of {} GPU(s){}: {:.2f} ms wall, {:.2f} ms CPU on average over {} rounds ({}; "
                     "slow readings and field values at most every {} ms, per-process queries at most every {} ms, "
                     "process utilization on {} of {} GPU reads, the others had no running process); by query group, "
                     "ms wall / CPU a round: {}",
                     gpus_.size(), label, wall / n / 1e6, cpu / n / 1e6, c.rounds, every,
                     which == kScheduleIdle ? opt_.idle_slow_interval_ms : opt_.slow_interval_ms,
                     opt_.process_interval_ms, c.proc_util_reads, c.proc_reads, by));
  }
  std::set<std::string> overrun_noted_;
  size_t stride_noted_ = sizeof(nvml::ProcessInfo);

  std::string error(nvml::Return r) const {
    const char* s = api_.ErrorString ? api_.ErrorString(r) : nullptr;
    return (s ? std::string(s) : "NVML error") + " (" + std::to_string(r) + ")";
  }

  template <typename F>
  void bind(F& fn, std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (void* p = ::dlsym(lib_, n)) {
        fn = reinterpret_cast<F>(p);
        return;
      }
  }

  bool open_library(std::string& why) {
    if (!lib_) lib_ = ::dlopen(opt_.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      const char* e = ::dlerror();
      why = "cannot load " + opt_.library + (e ? std::string(": ") + e : std::string());
      return false;
    }
    bind(api_.Init, {"nvmlInit_v2", "nvmlInit"});
    bind(api_.Shutdown, {"nvmlShutdown"});
    bind(api_.ErrorString, {"nvmlErrorString"});
    bind(api_.DeviceGetCount, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
    bind(api_.DeviceGetHandleByIndex, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
    bind(api_.DeviceGetName, {"nvmlDeviceGetName"});
    bind(api_.DeviceGetUtilizationRates, {"nvmlDeviceGetUtilizationRates"});
    bind(api_.DeviceGetMemoryInfo, {"nvmlDeviceGetMemoryInfo"});
    bind(api_.DeviceGetMemoryInfoV2, {"nvmlDeviceGetMemoryInfo_v2"});
    bind(api_.DeviceGetPowerUsage, {"nvmlDeviceGetPowerUsage"});
    bind(api_.DeviceGetTotalEnergyConsumption, {"nvmlDeviceGetTotalEnergyConsumption"});
    bind(api_.DeviceGetTemperature, {"nvmlDeviceGetTemperature"});
    bind(api_.DeviceGetClockInfo, {"nvmlDeviceGetClockInfo"});
    bind(api_.DeviceGetPcieThroughput, {"nvmlDeviceGetPcieThroughput"});
    bind(api_.DeviceGetFieldValues, {"nvmlDeviceGetFieldValues"});
    // Renamed in driver 535; the old name stays exported for compatibility.
    bind(api_.DeviceGetClockReasons,
         {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
    bind(api_.DeviceGetTotalEccErrors, {"nvmlDeviceGetTotalEccErrors"});
    bind(api_.DeviceGetProcessUtilization, {"nvmlDeviceGetProcessUtilization"});
    bind(api_.DeviceGetComputeRunningProcesses,
         {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
    bind(api_.EventSetCreate, {"nvmlEventSetCreate"});
    bind(api_.DeviceRegisterEvents, {"nvmlDeviceRegisterEvents"});
    bind(api_.EventSetWait, {"nvmlEventSetWait_v2"});
    bind(api_.EventSetFree, {"nvmlEventSetFree"});
    if (!api_.Init || !api_.DeviceGetCount || !api_.DeviceGetHandleByIndex) {
      why = opt_.library + " lacks nvmlInit/nvmlDeviceGetCount/nvmlDeviceGetHandleByIndex";
      return false;
    }
    if (nvml::Return r = api_.Init(); r != nvml::kSuccess) {
      why = "nvmlInit failed: " + error(r);
      return false;
    }
    return true;
  }

  // Queries whose entry point the library lacks are off from the start (said once, not per GPU).
  void switch_off_missing(Gpu& g) {
    const std::pair<Probe, bool> have[] = {
        {kUtil, api_.DeviceGetUtilizationRates != nullptr}, {kMemory, api_.DeviceGetMemoryInfo != nullptr},
        {kPower, api_.DeviceGetPowerUsage != nullptr}, {kEnergy, api_.DeviceGetTotalEnergyConsumption != nullptr},
        {kTemp, api_.DeviceGetTemperature != nullptr}, {kClockSm, api_.DeviceGetClockInfo != nullptr},
        {kClockMem, api_.DeviceGetClockInfo != nullptr}, {kPcieTx, api_.DeviceGetPcieThroughput != nullptr},
        {kPcieRx, api_.DeviceGetPcieThroughput != nullptr}, {kPcieReplay, api_.DeviceGetFieldValues != nullptr},
        {kNvlinkTx, api_.DeviceGetFieldValues != nullptr}, {kNvlinkRx, api_.DeviceGetFieldValues != nullptr},
        {kThrottle, api_.DeviceGetClockReasons != nullptr}, {kEccCorrected, api_.DeviceGetTotalEccErrors != nullptr},
        {kEccUncorrected, api_.DeviceGetTotalEccErrors != nullptr},
        {kProcUtil, opt_.per_process && api_.DeviceGetProcessUtilization != nullptr},
        {kProcMem, opt_.per_process && api_.DeviceGetComputeRunningProcesses != nullptr},
        {kPcieTxCount, api_.DeviceGetFieldValues != nullptr}, {kPcieRxCount, api_.DeviceGetFieldValues != nullptr}};
    for (auto [p, ok] : have) {
      if (ok) continue;
      g.off[p] = true;
      if (g.index == 0 && (opt_.per_process || (p != kProcUtil && p != kProcMem)))
        note(std::string(kProbeNames[p]) + ": not in " + opt_.library + ", not recorded");
    }
  }

  // True on success. A permanent refusal switches the query off for this GPU; other failures skip this
  // sample only. Each (query, error) is reported once.
  bool check(Gpu& g, Probe p, nvml::Return r) {
    if (r == nvml::kSuccess) return true;
    bool permanent = r == nvml::kNotSupported || r == nvml::kFunctionNotFound || r == nvml::kNoPermission;
    if (permanent) g.off[p] = true;
    if (g.noted.insert({p, r}).second)
      note(g.device + ": " + kProbeNames[p] + ": " + error(r) + (permanent ? ", not recorded" : ", sample skipped"));
    return false;
  }

  void put(const std::string& name, const std::string& device, const char* unit, SeriesKind kind,
           SeriesCategory cat, int64_t t, double value) {
    std::string key = name + "{" + device + "}";
    auto it = series_.find(key);
    if (it == series_.end()) {
      SeriesInfo s{0, name, Subsystem::gpu, unit, kind, cat, host_, device, "nvml"};
      it = series_.emplace(key, sink_->add_series(s)).first;
    }
    batch_.push_back({it->second, t, value});
  }
  void gauge(Gpu& g, const char* name, const char* unit, int64_t t, double v) {
    put(name, g.device, unit, SeriesKind::gauge, SeriesCategory::dynamic, t, v);
  }
  void counter(Gpu& g, const char* name, const char* unit, SeriesCategory cat, int64_t t, double v) {
    put(name, g.device, unit, SeriesKind::counter, cat, t, v);
  }

  void sample_gpu(Gpu& g) {
    const int64_t t = monotonic_ns();
    auto on = [&](Probe p) { return !g.off[p]; };
    PhaseCost* phase = cost_[schedule_].phase;
    PhaseClock clock;
    if (on(kUtil)) {
      nvml::Utilization u{};
      if (check(g, kUtil, api_.DeviceGetUtilizationRates(g.handle, &u))) {
        gauge(g, "gpu.util", "ratio", t, u.gpu / 100.0);
        gauge(g, "gpu.mem.util", "ratio", t, u.memory / 100.0);
      }
    }
    if (on(kMemory)) {
      // v2 where the driver has it (R510+): its `used` is what nvidia-smi reports; v1 counts the driver's
      // reservation as used (about 0.6 GB more on an H200).
      nvml::Memory m{};
      nvml::MemoryV2 m2{};
      m2.version = nvml::kMemoryV2Version;
      const bool v2 = api_.DeviceGetMemoryInfoV2 != nullptr &&
                      api_.DeviceGetMemoryInfoV2(g.handle, &m2) == nvml::kSuccess;
      if (v2) m = {m2.total, m2.free, m2.used};
      if (v2 || check(g, kMemory, api_.DeviceGetMemoryInfo(g.handle, &m))) {
        gauge(g, "gpu.mem.used", "bytes", t, static_cast<double>(m.used));
        if (v2) gauge(g, "gpu.mem.reserved", "bytes", t, static_cast<double>(m2.reserved));
        if (static_cast<double>(m.total) != g.mem_total) {  // static: written when it changes only
          g.mem_total = static_cast<double>(m.total);
          put("gpu.mem.total", g.device, "bytes", SeriesKind::static_value, SeriesCategory::static_value, t,
              g.mem_total);
        }
      }
    }
    unsigned int ui = 0;
    unsigned long long ull = 0;
    if (on(kPower) && check(g, kPower, api_.DeviceGetPowerUsage(g.handle, &ui))) gauge(g, "gpu.power", "watts", t, ui / 1000.0);
    if (on(kTemp) && check(g, kTemp, api_.DeviceGetTemperature(g.handle, nvml::kTemperatureGpu, &ui)))
      gauge(g, "gpu.temp", "celsius", t, ui);
    if (on(kClockSm) && check(g, kClockSm, api_.DeviceGetClockInfo(g.handle, nvml::kClockSm, &ui)))
      gauge(g, "gpu.clock.sm", "hertz", t, ui * 1e6);
    if (on(kThrottle) && check(g, kThrottle, api_.DeviceGetClockReasons(g.handle, &ull))) {
      gauge(g, "gpu.throttle.reasons", "bitmask", t, static_cast<double>(ull));
      gauge(g, "gpu.throttle.power", "bool", t, (ull & (nvml::kSwPowerCap | nvml::kHwPowerBrake)) ? 1 : 0);
      gauge(g, "gpu.throttle.thermal", "bool", t, (ull & (nvml::kSwThermal | nvml::kHwThermal)) ? 1 : 0);
      gauge(g, "gpu.throttle.hw_slowdown", "bool", t, (ull & nvml::kHwSlowdown) ? 1 : 0);
    }
    clock.mark(phase[kPhaseReadings]);
    if (slow_due_) {
      if (on(kEnergy) && check(g, kEnergy, api_.DeviceGetTotalEnergyConsumption(g.handle, &ull)))
        counter(g, "gpu.energy", "joules", SeriesCategory::dynamic, t, ull / 1000.0);
      if (on(kClockMem) && check(g, kClockMem, api_.DeviceGetClockInfo(g.handle, nvml::kClockMem, &ui)))
        gauge(g, "gpu.clock.mem", "hertz", t, ui * 1e6);
      if (on(kEccCorrected) &&
          check(g, kEccCorrected,
                api_.DeviceGetTotalEccErrors(g.handle, nvml::kErrorCorrected, nvml::kVolatileEcc, &ull)))
        counter(g, "gpu.ecc.corrected", "count", SeriesCategory::event_counter, t, static_cast<double>(ull));
      if (on(kEccUncorrected) &&
          check(g, kEccUncorrected,
                api_.DeviceGetTotalEccErrors(g.handle, nvml::kErrorUncorrected, nvml::kVolatileEcc, &ull)))
        counter(g, "gpu.ecc.uncorrected", "count", SeriesCategory::event_counter, t, static_cast<double>(ull));
    }
    clock.mark(phase[kPhaseSlowReadings]);
    if (slow_due_) sample_fields(g, t);
    clock.mark(phase[kPhaseFields]);
    // nvmlDeviceGetPcieThroughput counts bytes over 20 ms and returns only then: 40 ms a GPU for both directions,
    // so 8 GPUs could not be sampled every 100 ms. Where the driver has the byte counters (fields 197/198, read
    // with the other fields) their rate over the slow period replaces it; else one GPU's throughput is read per
    // tick, in turn.
    // On an idle node a GPU where no process runs has nothing on its link but these queries: its 20 ms query (1.5 ms
    // of CPU a round on 4 idle H200s) waits for a process or a traced job.
    const bool link_unused = schedule_ == kScheduleIdle && g.running == 0u;
    if (!g.pcie_counted && !link_unused && (gpus_.size() <= 1 || tick_ % gpus_.size() == g.index_in_list)) {
      if (on(kPcieTx) && check(g, kPcieTx, api_.DeviceGetPcieThroughput(g.handle, nvml::kPcieTxBytes, &ui)))
        gauge(g, "gpu.pcie.tx", "bytes_per_second", t, ui * 1024.0);
      if (on(kPcieRx) && check(g, kPcieRx, api_.DeviceGetPcieThroughput(g.handle, nvml::kPcieRxBytes, &ui)))
        gauge(g, "gpu.pcie.rx", "bytes_per_second", t, ui * 1024.0);
    }
    clock.mark(phase[kPhasePcieQuery]);
    if (!process_due_) return;
    seen_pids_.clear();
    // The running-process list first (0.13 ms of CPU a round on 4 idle H200s): where it is empty, no
    // process-utilization query (10 ms a round there), since no process is there to attribute it to. Where the list
    // is unknown (the query off or failing) utilization is queried as before. The cost: a process that ended since
    // the last read loses its last utilization samples; graphics-only processes (not in the compute list) get none.
    std::optional<unsigned int> running;
    if (on(kProcMem)) running = sample_process_memory(g, t);
    g.running = running;
    clock.mark(phase[kPhaseProcMem]);
    if (on(kProcUtil)) {
      ScheduleCost& c = cost_[schedule_];
      ++c.proc_reads;
      if (running != 0u) {
        ++c.proc_util_reads;
        sample_process_util(g, t);
      }
    }
    clock.mark(phase[kPhaseProcUtil]);
    name_processes(g, t);
    clock.mark(phase[kPhaseNames]);
  }

  // gpu.proc.present {gpuN/pidP/comm}: 1 each interval a process is seen on the GPU, so that the per-process
  // series (keyed gpuN/pidP) have a name. NVML gives host pids: one that /proc here does not know (this
  // sampler in a container of its own pid namespace, or the process already gone) is named "?".
  void name_processes(Gpu& g, int64_t t) {
    for (unsigned int pid : seen_pids_) {
      std::string dev = g.device + "/pid" + std::to_string(pid) + "/" + comm_of(pid, t);
      if (!series_.count("gpu.proc.present{" + dev + "}")) {
        if (present_series_ >= kMaxPresentSeries) {
          if (!present_capped_) note("more than " + std::to_string(kMaxPresentSeries) +
                                     " GPU processes seen: later ones get no gpu.proc.present series (no name)");
          present_capped_ = true;
          continue;
        }
        ++present_series_;
      }
      put("gpu.proc.present", dev, "bool", SeriesKind::gauge, SeriesCategory::dynamic, t, 1.0);
    }
  }

  // A process's name, read from /proc at most once a second per pid (8 GPUs x a few processes at 100 ms would
  // otherwise read hundreds of files a second); names of pids not seen for a minute are dropped.
  const std::string& comm_of(unsigned int pid, int64_t now) {
    constexpr int64_t kRefreshNs = 1'000'000'000, kForgetNs = 60'000'000'000;
    if (now - comm_pruned_ns_ > kForgetNs) {
      std::erase_if(comms_, [&](auto& kv) { return now - kv.second.seen_ns > kForgetNs; });
      comm_pruned_ns_ = now;
    }
    CachedComm& c = comms_[pid];
    c.seen_ns = now;
    if (c.name.empty() || now - c.read_ns >= kRefreshNs) {
      auto text = procfs::read_small_file("/proc/" + std::to_string(pid) + "/comm", 64);
      c.name = text ? procfs::printable_comm(procfs::trim(*text)) : "?";
      c.read_ns = now;
    }
    return c.name;
  }

  // PCIe replays and NVLink data counters in one nvmlDeviceGetFieldValues call; each field has its own
  // return code, so one unsupported field leaves the others.
  void sample_fields(Gpu& g, int64_t t) {
    struct Want {
      Probe probe;
      unsigned int id;
    };
    std::vector<Want> want;
    for (Want w : {Want{kPcieReplay, nvml::kFieldPcieReplayCounter}, Want{kNvlinkTx, nvml::kFieldNvlinkDataTx},
                   Want{kNvlinkRx, nvml::kFieldNvlinkDataRx}, Want{kPcieTxCount, nvml::kFieldPcieCountTx},
                   Want{kPcieRxCount, nvml::kFieldPcieCountRx}})
      if (!g.off[w.probe]) want.push_back(w);
    if (want.empty()) return;
    // Guarded: on H200 hosts with NVLink (driver 580) this call writes past the entries it is given and
    // corrupts the heap (3 of 7 runs aborted on an H200 x2 host without the guard, none with it).
    GuardedBuffer buf(want.size() * sizeof(nvml::FieldValue));
    std::fill(buf.bytes.begin(), buf.bytes.begin() + static_cast<std::ptrdiff_t>(buf.used), 0);
    auto* fv = buf.as<nvml::FieldValue>();
    for (size_t i = 0; i < want.size(); ++i) {
      fv[i].fieldId = want[i].id;
      const bool nvlink = want[i].probe == kNvlinkTx || want[i].probe == kNvlinkRx;
      fv[i].scopeId = nvlink ? UINT_MAX : 0;  // UINT_MAX: summed over all NVLinks
    }
    nvml::Return r = api_.DeviceGetFieldValues(g.handle, static_cast<int>(want.size()), fv);
    check_guard(buf, "nvmlDeviceGetFieldValues");
    if (r != nvml::kSuccess) {
      for (auto& w : want) check(g, w.probe, r);
      return;
    }
    for (size_t i = 0; i < want.size(); ++i) {
      const Probe p = want[i].probe;
      if (p == kPcieTxCount || p == kPcieRxCount) {
        pcie_counter(g, p, fv[i], t);
        continue;
      }
      if (!check(g, p, fv[i].nvmlReturn)) continue;
      auto value = field_number(fv[i]);
      if (!value) continue;
      if (want[i].probe == kPcieReplay)
        counter(g, "gpu.pcie.replay", "count", SeriesCategory::event_counter, t, *value);
      else
        counter(g, want[i].probe == kNvlinkTx ? "gpu.nvlink.tx" : "gpu.nvlink.rx", "bytes", SeriesCategory::dynamic, t,
                *value * 1024.0);
    }
  }

  // A PCIe byte counter: its rate since the last reading is gpu.pcie.tx / rx. Only a 64-bit counter is used:
  // a 32-bit one wraps every 4 GiB, under 0.1 s at Gen5 rates, so a wrap between readings could not be told.
  // Unsupported (an older driver) or 32-bit: switched off quietly, the throughput query stays.
  void pcie_counter(Gpu& g, Probe p, const nvml::FieldValue& f, int64_t t) {
    if (f.nvmlReturn != nvml::kSuccess || f.valueType != nvml::kULongLong) {
      // Said once per GPU, with what the driver answered: on the 4-GPU H200 host (driver 580) the throughput query
      // is used, and without this note nothing tells whether the fields were refused or came back 32-bit.
      if (!g.off[kPcieTxCount] && !g.off[kPcieRxCount])
        note(fmt::format("{}: PCIe byte counters (fields {}/{}): {}; the 20 ms throughput query is used instead",
                         g.device, nvml::kFieldPcieCountTx, nvml::kFieldPcieCountRx,
                         f.nvmlReturn != nvml::kSuccess
                             ? error(f.nvmlReturn)
                             : fmt::format("value type {} (not a 64-bit counter: a 32-bit one wraps every 4 GiB, "
                                           "under 0.1 s at PCIe Gen5 rates)",
                                           f.valueType)));
      g.off[p] = true;
      g.pcie_counted = false;
      return;
    }
    auto& last = g.pcie_count[p == kPcieTxCount ? 0 : 1];
    const unsigned long long v = f.value.ullVal;
    if (last && v >= last->second && t > last->first) {
      gauge(g, p == kPcieTxCount ? "gpu.pcie.tx" : "gpu.pcie.rx", "bytes_per_second", t,
            static_cast<double>(v - last->second) * 1e9 / static_cast<double>(t - last->first));
    }
    last = {t, v};
    g.pcie_counted = true;
  }

  static std::optional<double> field_number(const nvml::FieldValue& f) {
    switch (f.valueType) {
      case nvml::kDouble: return f.value.dVal;
      case nvml::kUInt: return f.value.uiVal;
      case nvml::kULong: return static_cast<double>(f.value.ulVal);
      case nvml::kULongLong: return static_cast<double>(f.value.ullVal);
      case nvml::kSLongLong: return static_cast<double>(f.value.sllVal);
      case nvml::kSInt: return f.value.siVal;
      case nvml::kUShort: return f.value.usVal;
      default: return std::nullopt;
    }
  }

  // NVML fills caller-sized arrays from inside the driver library, where no sanitizer sees a write past the
  // end. Each array here has a guard region of sentinel bytes after the entries NVML is told about; a guard
  // found changed is said once (and did no harm: it was ours).
  static constexpr unsigned char kSentinel = 0xA5;
  static constexpr size_t kGuardBytes = 4096;
  struct GuardedBuffer {
    std::vector<unsigned char> bytes;
    size_t used = 0;  // bytes NVML may write
    explicit GuardedBuffer(size_t n) : bytes(n + kGuardBytes, kSentinel), used(n) {}
    template <class T>
    T* as() {
      return reinterpret_cast<T*>(bytes.data());
    }
    // Bytes written past `used` (the highest changed guard byte's distance past the end; 0: none).
    size_t overrun() const {
      for (size_t i = bytes.size(); i > used; --i)
        if (bytes[i - 1] != kSentinel) return i - used;
      return 0;
    }
  };
  void check_guard(const GuardedBuffer& b, const char* call) {
    if (const size_t over = b.overrun(); over > 0 && overrun_noted_.insert(call).second)
      note(fmt::format("{} wrote {} bytes past the {} bytes it was given (a driver/header struct mismatch); the guard "
                       "region absorbed them",
                       call, over, b.used));
  }

  void sample_process_util(Gpu& g, int64_t t) {
    unsigned int n = 0;
    nvml::Return r = api_.DeviceGetProcessUtilization(g.handle, nullptr, &n, g.last_proc_sample_us);
    if (r == nvml::kNotFound) return;  // no process sample since the last one: not an error
    if (r != nvml::kInsufficientSize && r != nvml::kSuccess) {
      check(g, kProcUtil, r);
      return;
    }
    if (n == 0) return;
    // Samples keep arriving between the two calls: room for more than the count just given.
    n += 32;
    GuardedBuffer buf(n * sizeof(nvml::ProcessUtilizationSample));
    auto* s = buf.as<nvml::ProcessUtilizationSample>();
    const unsigned int room = n;
    r = api_.DeviceGetProcessUtilization(g.handle, s, &n, g.last_proc_sample_us);
    check_guard(buf, "nvmlDeviceGetProcessUtilization");
    if (r == nvml::kNotFound || !check(g, kProcUtil, r)) return;
    // NVML keeps the driver's samples since the timestamp given (several a second): read less often than they
    // come, a process's figure is the mean of its samples since the last read, so nothing between reads is lost.
    struct Mean {
      double sm = 0, mem = 0;
      int n = 0;
    };
    std::map<unsigned int, Mean> by_pid;
    for (unsigned int i = 0; i < n && i < room; ++i) {
      Mean& m = by_pid[s[i].pid];
      m.sm += s[i].smUtil;
      m.mem += s[i].memUtil;
      ++m.n;
      g.last_proc_sample_us = std::max(g.last_proc_sample_us, s[i].timeStamp);
      seen_pids_.insert(s[i].pid);
    }
    for (auto& [pid, m] : by_pid) {
      std::string dev = g.device + "/pid" + std::to_string(pid);
      put("gpu.proc.sm_util", dev, "ratio", SeriesKind::gauge, SeriesCategory::dynamic, t, m.sm / m.n / 100.0);
      put("gpu.proc.mem_util", dev, "ratio", SeriesKind::gauge, SeriesCategory::dynamic, t, m.mem / m.n / 100.0);
    }
  }

  // nvmlDeviceGetComputeRunningProcesses_v3 fills 24-byte entries on most drivers and 32-byte ones (with
  // usedGpuCcProtectedMemory) on some: the stride is read from how far the entries reached into a sentinel-filled
  // buffer with room for either.
  // The number of processes running on the GPU; nullopt when the query failed.
  std::optional<unsigned int> sample_process_memory(Gpu& g, int64_t t) {
    constexpr size_t kMaxStride = 32;
    unsigned int room = 64;
    std::optional<GuardedBuffer> buf;
    unsigned int n = 0;
    nvml::Return r = nvml::kInsufficientSize;
    for (int attempt = 0; attempt < 2 && r == nvml::kInsufficientSize; ++attempt) {
      buf.emplace(room * kMaxStride);
      // Room for `room` entries of either layout.
      n = room;
      const unsigned int told = n;
      r = api_.DeviceGetComputeRunningProcesses(g.handle, &n, buf->as<nvml::ProcessInfo>());
      if (r == nvml::kInsufficientSize) room = std::max(n, told) + 16;
    }
    check_guard(*buf, "nvmlDeviceGetComputeRunningProcesses");
    if (!check(g, kProcMem, r)) return std::nullopt;
    n = std::min(n, room);
    size_t stride = sizeof(nvml::ProcessInfo);
    if (n > 0) {
      size_t reach = 0;  // one past the last byte written
      for (size_t i = buf->used; i > 0; --i)
        if (buf->bytes[i - 1] != kSentinel) {
          reach = i;
          break;
        }
      // 24-byte entries end by n*24; anything written past that (up to n*32) is the longer layout. A last entry
      // whose trailing bytes equal the sentinel only makes the guess short, never long.
      if (reach > n * sizeof(nvml::ProcessInfo)) stride = kMaxStride;
      if (stride != stride_noted_) {
        stride_noted_ = stride;
        if (stride != sizeof(nvml::ProcessInfo))
          note(fmt::format("nvmlDeviceGetComputeRunningProcesses fills {}-byte entries here: read as such", stride));
      }
    }
    for (unsigned int i = 0; i < n; ++i) {
      nvml::ProcessInfo info;
      std::memcpy(&info, buf->bytes.data() + i * stride, sizeof info);
      seen_pids_.insert(info.pid);
      if (info.usedGpuMemory == nvml::kValueNotAvailable) continue;
      put("gpu.proc.mem.used", g.device + "/pid" + std::to_string(info.pid), "bytes", SeriesKind::gauge,
          SeriesCategory::dynamic, t, static_cast<double>(info.usedGpuMemory));
    }
    return n;
  }

  void sample_loop() {
    auto next = std::chrono::steady_clock::now();
    int64_t last_slow = 0, last_process = 0;
    bool first = true;
    for (;;) {
      int interval = interval_ms_;
      if (opt_.live_interval_ms)
        if (const int live = opt_.live_interval_ms->load(std::memory_order_relaxed); live > 0) interval = live;
      schedule_ = opt_.live_idle && opt_.live_idle->load(std::memory_order_relaxed) ? kScheduleIdle : kScheduleJob;
      ScheduleCost& cost = cost_[schedule_];
      cost.min_interval_ms = std::min(cost.min_interval_ms, interval);
      cost.max_interval_ms = std::max(cost.max_interval_ms, interval);
      // A slower group is due once its period is within half a round of having passed, so that a 1000 ms group at
      // 100 ms rounds comes every 10th round, not every 11th. Leaving the idle schedule, the slow groups (last read
      // up to idle_slow_interval_ms ago) are due at once.
      const int64_t now_ns = monotonic_ns(), half_round = static_cast<int64_t>(interval) * 500'000;
      const int64_t slow_ns = schedule_ == kScheduleIdle ? idle_slow_ns_ : slow_ns_;
      slow_due_ = first || now_ns - last_slow >= slow_ns - half_round;
      process_due_ = first || now_ns - last_process >= process_ns_ - half_round;
      if (slow_due_) last_slow = now_ns;
      if (process_due_) last_process = now_ns;
      first = false;
      for (auto& g : gpus_) sample_gpu(g);
      ++tick_;
      ++cost.rounds;
      if (!batch_.empty()) {
        sink_->append_samples(batch_);
        batch_.clear();
      }
      next += std::chrono::milliseconds(interval);
      auto now = std::chrono::steady_clock::now();
      if (next < now) next = now;  // fell behind (slow NVML): do not burst to catch up
      std::unique_lock lk(mu_);
      if (cv_.wait_until(lk, next, [this] { return stopping_; })) return;
    }
  }

  void start_xid_watch() {
    if (!api_.EventSetCreate || !api_.DeviceRegisterEvents || !api_.EventSetWait) {
      note("XID events: not in " + opt_.library + ", not recorded");
      return;
    }
    if (nvml::Return r = api_.EventSetCreate(&event_set_); r != nvml::kSuccess) {
      note("XID events: nvmlEventSetCreate failed: " + error(r) + ", not recorded");
      event_set_ = nullptr;
      return;
    }
    int registered = 0;
    for (auto& g : gpus_) {
      nvml::Return r = api_.DeviceRegisterEvents(g.handle, nvml::kEventTypeXidCriticalError, event_set_);
      if (r == nvml::kSuccess) ++registered;
      else note(g.device + ": XID events: " + error(r) + ", not recorded");
    }
    if (registered) xid_ = std::thread([this] {
      name_this_thread("ss-nvml-xid");
      xid_loop();
    });
  }

  // One wait for XID events at a time, each up to kXidWaitMs (short: stop() waits for this thread). A wait that
  // comes back early without an XID (success with another event type, an immediate timeout, an error) is waited
  // out to its full length before the next: on the 4-GPU H200 host a second event set's waits come back at once,
  // which would spin this thread on a whole core. What NVML returned is noted once.
  static constexpr unsigned int kXidWaitMs = 200;
  void xid_loop() {
    bool early_noted = false, failed_noted = false;
    for (;;) {
      {
        std::lock_guard lk(mu_);
        if (stopping_) return;
      }
      nvml::EventData d{};
      const auto began = std::chrono::steady_clock::now();
      nvml::Return r = api_.EventSetWait(event_set_, &d, kXidWaitMs);
      const auto waited = std::chrono::steady_clock::now() - began;
      if (r == nvml::kSuccess && (d.eventType & nvml::kEventTypeXidCriticalError)) {
        Event e;
        e.layer = Layer::nvml;
        e.flags = kEventInstant;
        e.start_ns = monotonic_ns();
        e.name = "xid";
        e.args.push_back({"xid", static_cast<int64_t>(d.eventData)});
        for (auto& g : gpus_)
          if (g.handle == d.device) {
            e.args.push_back({"gpu", static_cast<int64_t>(g.index)});
            e.args.push_back({"device", g.device});
          }
        sink_->append_event(std::move(e));
        continue;  // a real event: straight back to waiting for the next
      }
      const auto full = std::chrono::milliseconds(kXidWaitMs);
      const double waited_ms = std::chrono::duration<double, std::milli>(waited).count();
      if (r != nvml::kSuccess && r != nvml::kTimeout) {
        if (!failed_noted) note("XID events: nvmlEventSetWait failed: " + error(r) + "; retried every " +
                                std::to_string(kXidWaitMs) + " ms");
        failed_noted = true;
      } else if (waited < full / 2 && !early_noted) {
        note(fmt::format("XID events: nvmlEventSetWait_v2 came back after {:.1f} ms of its {} ms with {} and no XID; "
                         "such waits are waited out to {} ms",
                         waited_ms, kXidWaitMs,
                         r == nvml::kSuccess ? fmt::format("success, event type {:#x}", d.eventType) : error(r),
                         kXidWaitMs));
        early_noted = true;
      }
      if (waited >= full) continue;
      std::unique_lock lk(mu_);
      if (cv_.wait_for(lk, full - waited, [this] { return stopping_; })) return;
    }
  }

  NvmlSamplerOptions opt_;
  void* lib_ = nullptr;
  nvml::Api api_;
  TelemetrySink* sink_ = nullptr;
  std::string host_;
  int interval_ms_ = 100;
  int64_t slow_ns_ = 1'000'000'000, process_ns_ = 500'000'000, idle_slow_ns_ = 30'000'000'000;
  bool slow_due_ = true, process_due_ = true;  // this round reads the slow groups (sampler thread only)
  size_t tick_ = 0;  // sampling rounds so far (whose turn the PCIe throughput query is)
  std::vector<Gpu> gpus_;
  std::map<std::string, SeriesId> series_;  // sampler thread only
  std::vector<Sample> batch_;               // sampler thread only
  std::set<unsigned int> seen_pids_;        // sampler thread only: processes on the GPU being sampled
  struct CachedComm {
    std::string name;
    int64_t read_ns = 0, seen_ns = 0;
  };
  std::map<unsigned int, CachedComm> comms_;  // sampler thread only
  int64_t comm_pruned_ns_ = 0;
  static constexpr size_t kMaxPresentSeries = 256;
  size_t present_series_ = 0;
  bool present_capped_ = false;
  nvml::EventSet event_set_ = nullptr;
  std::thread sampler_, xid_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::atomic<bool> running_{false};
  bool announced_ = false;
};

}  // namespace

std::unique_ptr<Collector> make_nvml_sampler(const NvmlSamplerOptions& options) {
  return std::make_unique<NvmlSampler>(options);
}

}  // namespace stackscope
