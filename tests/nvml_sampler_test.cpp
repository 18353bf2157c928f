// NVML sampler: without the library (this machine) it says so once and goes on; with a fake
// libnvidia-ml.so.1 (tests/progs/fake_nvml) it records every supported query and skips refused ones for good.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "sample/nvml_sampler.h"

using namespace stackscope;

namespace {

// Keeps everything; the NVML sampler writes from two threads.
class CaptureSink : public TelemetrySink {
 public:
  SeriesId add_series(const SeriesInfo& info) override {
    std::lock_guard lk(mu_);
    for (auto& s : series)
      if (s.key() == info.key() && s.host == info.host) return s.id;
    series.push_back(info);
    series.back().id = static_cast<SeriesId>(series.size());
    return series.back().id;
  }
  void append_event(Event&& e) override {
    std::lock_guard lk(mu_);
    events.push_back(std::move(e));
  }
  void append_samples(std::span<const Sample> s) override {
    std::lock_guard lk(mu_);
    samples.insert(samples.end(), s.begin(), s.end());
  }
  void add_drops(std::string_view, uint64_t) override {}
  void add_note(std::string_view source, std::string_view text) override {
    std::lock_guard lk(mu_);
    notes.push_back(std::string(source) + ": " + std::string(text));
  }
  const SeriesInfo* find(const std::string& name, const std::string& device) const {
    for (auto& s : series)
      if (s.name == name && s.device == device) return &s;
    return nullptr;
  }
  // Last value of a series, NaN when absent.
  double last(const std::string& name, const std::string& device) const {
    auto* s = find(name, device);
    double v = std::nan("");
    if (s)
      for (auto& x : samples)
        if (x.series == s->id) v = x.value;
    return v;
  }
  size_t count(const std::string& name, const std::string& device) const {
    auto* s = find(name, device);
    size_t n = 0;
    if (s)
      for (auto& x : samples) n += x.series == s->id;
    return n;
  }
  std::mutex mu_;
  std::vector<SeriesInfo> series;
  std::vector<Sample> samples;
  std::vector<Event> events;
  std::vector<std::string> notes;
};

const std::string kFakeNvml = std::string(STACKSCOPE_BUILD_DIR) + "/tests/progs/fake_nvml/libnvidia-ml.so.1";

int fake_calls(const char* name, int device) {
  void* h = ::dlopen(kFakeNvml.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!h) return -1;
  auto fn = reinterpret_cast<int (*)(const char*, int)>(::dlsym(h, "fake_nvml_calls"));
  int n = fn ? fn(name, device) : -1;
  ::dlclose(h);
  return n;
}

}  // namespace

TEST(NvmlSampler, AbsentLibraryIsReportedOnceAndNothingBreaks) {
  CaptureSink sink;
  NvmlSamplerOptions o;
  o.library = "/nonexistent/libnvidia-ml.so.1";
  auto c = make_nvml_sampler(o);
  EXPECT_EQ(c->layer(), Layer::nvml);
  EXPECT_FALSE(c->needs_root());
  CollectorStatus st = c->start(sink, {});
  EXPECT_FALSE(st.running);
  EXPECT_NE(st.message.find("NVML unavailable"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << st.message;
  EXPECT_FALSE(c->start(sink, {}).running);  // tried again: still no second note
  c->stop();
  c->stop();
  ASSERT_EQ(sink.notes.size(), 1u);
  EXPECT_NE(sink.notes[0].find("no GPU telemetry"), std::string::npos);
  EXPECT_TRUE(sink.series.empty());
}

TEST(NvmlSampler, FakeLibraryGivesSeriesInBaseUnitsAndSkipsUnsupportedQueries) {
  CaptureSink sink;
  NvmlSamplerOptions o;
  o.library = kFakeNvml;
  o.interval_ms = 10;
  o.slow_interval_ms = 20;  // every other round: the counters' rates need two readings within the test
  o.process_interval_ms = 10;
  auto c = make_nvml_sampler(o);
  CollectorOptions co;
  co.host = "h1";
  CollectorStatus st = c->start(sink, co);
  ASSERT_TRUE(st.running) << st.message;
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  c->stop();

  std::lock_guard lk(sink.mu_);
  // GPU 0: every reading, converted to base units.
  EXPECT_DOUBLE_EQ(sink.last("gpu.util", "gpu0"), 0.42);
  EXPECT_DOUBLE_EQ(sink.last("gpu.mem.util", "gpu0"), 0.17);
  // gpu0 answers nvmlDeviceGetMemoryInfo_v2: used without the driver's reservation (what nvidia-smi shows);
  // gpu1 answers v1 only, whose used includes it.
  EXPECT_DOUBLE_EQ(sink.last("gpu.mem.used", "gpu0"), 19.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(sink.last("gpu.mem.reserved", "gpu0"), 1.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(sink.last("gpu.mem.used", "gpu1"), 20.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(sink.last("gpu.mem.total", "gpu0"), 80.0 * (1ull << 30));
  EXPECT_EQ(sink.count("gpu.mem.total", "gpu0"), 1u);  // static: written once
  EXPECT_DOUBLE_EQ(sink.last("gpu.power", "gpu0"), 123.456);
  EXPECT_DOUBLE_EQ(sink.last("gpu.temp", "gpu0"), 55);
  EXPECT_DOUBLE_EQ(sink.last("gpu.clock.sm", "gpu0"), 1980e6);
  EXPECT_DOUBLE_EQ(sink.last("gpu.clock.mem", "gpu0"), 2619e6);
  EXPECT_DOUBLE_EQ(sink.last("gpu.pcie.tx", "gpu0"), 1000 * 1024.0);
  EXPECT_DOUBLE_EQ(sink.last("gpu.pcie.rx", "gpu0"), 2000 * 1024.0);
  EXPECT_DOUBLE_EQ(sink.last("gpu.pcie.replay", "gpu0"), 3);
  EXPECT_DOUBLE_EQ(sink.last("gpu.throttle.reasons", "gpu0"), 0x24);
  EXPECT_DOUBLE_EQ(sink.last("gpu.throttle.power", "gpu0"), 1);
  EXPECT_DOUBLE_EQ(sink.last("gpu.throttle.thermal", "gpu0"), 1);
  EXPECT_DOUBLE_EQ(sink.last("gpu.throttle.hw_slowdown", "gpu0"), 0);
  EXPECT_DOUBLE_EQ(sink.last("gpu.ecc.corrected", "gpu0"), 5);
  EXPECT_DOUBLE_EQ(sink.last("gpu.ecc.uncorrected", "gpu0"), 0);
  // Per process: the mean of the samples since the last read (30 and 50 %); a process whose memory NVML cannot tell is
  // left out.
  EXPECT_DOUBLE_EQ(sink.last("gpu.proc.sm_util", "gpu0/pid4242"), 0.40);
  EXPECT_DOUBLE_EQ(sink.last("gpu.proc.mem_util", "gpu0/pid4242"), 0.225);
  EXPECT_DOUBLE_EQ(sink.last("gpu.proc.mem.used", "gpu0/pid4242"), 1.0 * (1ull << 30));
  EXPECT_EQ(sink.find("gpu.proc.mem.used", "gpu0/pid4343"), nullptr);
  // Kinds, categories, units and provenance.
  auto* energy_absent = sink.find("gpu.energy", "gpu0");
  EXPECT_EQ(energy_absent, nullptr);  // the fake does not export nvmlDeviceGetTotalEnergyConsumption
  auto* ecc = sink.find("gpu.ecc.corrected", "gpu0");
  ASSERT_NE(ecc, nullptr);
  EXPECT_EQ(ecc->kind, SeriesKind::counter);
  EXPECT_EQ(ecc->category, SeriesCategory::event_counter);
  EXPECT_EQ(ecc->subsystem, Subsystem::gpu);
  EXPECT_EQ(ecc->source, "nvml");
  EXPECT_EQ(ecc->host, "h1");
  EXPECT_EQ(sink.find("gpu.mem.total", "gpu0")->kind, SeriesKind::static_value);
  EXPECT_EQ(sink.find("gpu.power", "gpu0")->unit, "watts");

  // GPU 1 refuses power, ECC and NVLink: those series are absent, the others present.
  EXPECT_EQ(sink.find("gpu.power", "gpu1"), nullptr);
  EXPECT_EQ(sink.find("gpu.ecc.corrected", "gpu1"), nullptr);
  EXPECT_EQ(sink.find("gpu.nvlink.tx", "gpu0"), nullptr);
  EXPECT_DOUBLE_EQ(sink.last("gpu.nvlink.tx", "gpu1"), 100 * 1024.0);
  EXPECT_DOUBLE_EQ(sink.last("gpu.nvlink.rx", "gpu1"), 200 * 1024.0);
  EXPECT_DOUBLE_EQ(sink.last("gpu.util", "gpu1"), 0.10);
  EXPECT_DOUBLE_EQ(sink.last("gpu.pcie.replay", "gpu1"), 3);
  // GPU 1 has the PCIe byte counters: their rate (5 and 2 GB/s in the fake) replaces the throughput query, which
  // blocks 20 ms a direction; GPU 0 has none and keeps the query.
  EXPECT_NEAR(sink.last("gpu.pcie.tx", "gpu1"), 5e9, 5e8);
  EXPECT_NEAR(sink.last("gpu.pcie.rx", "gpu1"), 2e9, 2e8);
  EXPECT_LE(fake_calls("pcie", 1), 2) << "at most the first round, before a counter rate exists";
  // Why GPU 0 uses the throughput query: said once, with the driver's answer.
  EXPECT_EQ(std::count_if(sink.notes.begin(), sink.notes.end(),
                          [](auto& n) {
                            return n.find("gpu0: PCIe byte counters (fields 197/198): Not Supported (3); the 20 ms "
                                          "throughput query is used instead") != std::string::npos;
                          }),
            1);
  EXPECT_EQ(std::count_if(sink.notes.begin(), sink.notes.end(),
                          [](auto& n) { return n.find("gpu1: PCIe byte counters") != std::string::npos; }),
            0);
  EXPECT_GE(fake_calls("pcie", 0), 4);
  // ... and are asked once only, while the supported ones are asked every interval.
  int util_calls = fake_calls("util", 1);
  EXPECT_GE(util_calls, 5);
  EXPECT_EQ(fake_calls("power", 1), 1);
  EXPECT_EQ(fake_calls("ecc", 1), 2);  // corrected and uncorrected: each refused once
  // GPU 0 refuses NVLink but not the PCIe replay field in the same call: that call goes on every slow round.
  EXPECT_GE(fake_calls("fields", 0), 3);

  // The XID the fake reports once became one nvml event.
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].layer, Layer::nvml);
  EXPECT_EQ(sink.events[0].name, "xid");
  EXPECT_EQ(sink.events[0].arg_int("xid"), 79);
  EXPECT_EQ(sink.events[0].arg_int("gpu", -1), 0);
  EXPECT_TRUE(sink.events[0].flags & kEventInstant);

  // Each refusal noted once, not once per sample.
  int power_notes = 0, energy_notes = 0;
  for (auto& n : sink.notes) {
    power_notes += n.find("gpu1: power: Not Supported") != std::string::npos;
    energy_notes += n.find("energy: not in") != std::string::npos;
  }
  EXPECT_EQ(power_notes, 1);
  EXPECT_EQ(energy_notes, 1);
  // At stop, where the sampling thread's time went, by query group (the GPU 0 throughput queries among them).
  auto cost = std::find_if(sink.notes.begin(), sink.notes.end(),
                           [](auto& n) { return n.find("sampling round of 2 GPU(s)") != std::string::npos; });
  ASSERT_NE(cost, sink.notes.end());
  EXPECT_NE(cost->find("PCIe throughput (20 ms each)"), std::string::npos) << *cost;
  EXPECT_NE(cost->find("process utilization"), std::string::npos) << *cost;
}

// gpu.proc.present names each process seen on a GPU: comm from /proc for a real process; "?" for a pid that /proc
// here does not know (a process of another pid namespace, or gone).
TEST(NvmlSampler, ProcessesSeenOnAGpuAreNamed) {
  pid_t child = ::fork();
  if (child == 0) {
    ::prctl(PR_SET_NAME, "gpu_culprit");
    for (;;) ::pause();
  }
  ASSERT_GT(child, 0);
  auto comm_of = [](pid_t p) {
    std::string c;
    std::getline(std::ifstream("/proc/" + std::to_string(p) + "/comm"), c);
    return c;
  };
  for (int i = 0; i < 200 && comm_of(child) != "gpu_culprit"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(comm_of(child), "gpu_culprit");
  unsigned int nobody = 0;
  for (unsigned int p = 4194302; p > 1000 && !nobody; --p)
    if (::kill(static_cast<pid_t>(p), 0) != 0 && errno == ESRCH) nobody = p;
  ASSERT_NE(nobody, 0u);

  void* lib = ::dlopen(kFakeNvml.c_str(), RTLD_NOW);  // the same instance the sampler loads
  ASSERT_NE(lib, nullptr) << ::dlerror();
  auto set_pids = reinterpret_cast<void (*)(unsigned int, unsigned int)>(::dlsym(lib, "fake_nvml_set_pids"));
  ASSERT_NE(set_pids, nullptr);
  set_pids(static_cast<unsigned int>(child), nobody);

  CaptureSink sink;
  NvmlSamplerOptions o;
  o.library = kFakeNvml;
  o.interval_ms = 10;
  o.process_interval_ms = 10;
  o.xid_events = false;
  auto c = make_nvml_sampler(o);
  ASSERT_TRUE(c->start(sink, {}).running);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  c->stop();
  set_pids(4242, 4343);
  ::dlclose(lib);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);

  std::lock_guard lk(sink.mu_);
  const std::string gpu0_child = "gpu0/pid" + std::to_string(child);
  EXPECT_DOUBLE_EQ(sink.last("gpu.proc.mem.used", gpu0_child), 1.0 * (1ull << 30));  // the per-process series
  const SeriesInfo* named = sink.find("gpu.proc.present", gpu0_child + "/gpu_culprit");
  ASSERT_NE(named, nullptr);
  EXPECT_EQ(named->kind, SeriesKind::gauge);
  EXPECT_EQ(named->subsystem, Subsystem::gpu);
  EXPECT_DOUBLE_EQ(sink.last("gpu.proc.present", gpu0_child + "/gpu_culprit"), 1.0);
  EXPECT_GE(sink.count("gpu.proc.present", gpu0_child + "/gpu_culprit"), 3u);  // every interval it is seen
  // Listed with no memory figure, still seen: named, "?" since /proc has no such pid.
  EXPECT_DOUBLE_EQ(sink.last("gpu.proc.present", "gpu0/pid" + std::to_string(nobody) + "/?"), 1.0);
  for (auto& s : sink.series) {
    if (s.name == "gpu.proc.present") {
      EXPECT_EQ(s.device.rfind("gpu0/", 0), 0u) << s.device;  // gpu1 has none
    }
  }
}

// A driver whose entries are longer than the header's, or that writes past the count it was given: the sampler
// reads the right stride, its guard takes the overrun (said once), and the figures stay right.
TEST(NvmlSampler, DriverStructMismatchIsReadRightAndOverrunsAreContained) {
  void* lib = ::dlopen(kFakeNvml.c_str(), RTLD_NOW);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  auto misbehave = reinterpret_cast<void (*)(int)>(::dlsym(lib, "fake_nvml_set_misbehave"));
  ASSERT_NE(misbehave, nullptr);
  misbehave(1);
  CaptureSink sink;
  NvmlSamplerOptions o;
  o.library = kFakeNvml;
  o.interval_ms = 10;
  o.xid_events = false;
  auto c = make_nvml_sampler(o);
  ASSERT_TRUE(c->start(sink, {}).running);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  c->stop();
  misbehave(0);
  ::dlclose(lib);

  std::lock_guard lk(sink.mu_);
  EXPECT_DOUBLE_EQ(sink.last("gpu.proc.mem.used", "gpu0/pid4242"), 1.0 * (1ull << 30));
  EXPECT_EQ(sink.find("gpu.proc.mem.used", "gpu0/pid4343"), nullptr);  // "not available", read as such
  EXPECT_DOUBLE_EQ(sink.last("gpu.proc.sm_util", "gpu0/pid4242"), 0.4);  // the mean of the counted samples
  int stride = 0, overrun = 0, fields_overrun = 0;
  for (auto& n : sink.notes) {
    stride += n.find("fills 32-byte entries") != std::string::npos;
    overrun += n.find("nvmlDeviceGetProcessUtilization wrote") != std::string::npos;
    fields_overrun += n.find("nvmlDeviceGetFieldValues wrote 40 bytes past") != std::string::npos;
  }
  EXPECT_EQ(stride, 1);
  EXPECT_EQ(overrun, 1);
  EXPECT_EQ(fields_overrun, 1);
  EXPECT_DOUBLE_EQ(sink.last("gpu.nvlink.tx", "gpu1"), 100 * 1024.0);  // the fields themselves still read
}

// An XID wait that NVML answers at once (success with another event type, an immediate timeout, an error) is waited
// out to its full length: the XID thread must not spin (it would take a whole core on a 4-GPU H200 host).
TEST(NvmlSampler, XidWaitsThatReturnAtOnceDoNotSpin) {
  void* lib = ::dlopen(kFakeNvml.c_str(), RTLD_NOW);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  auto set_wait_mode = reinterpret_cast<void (*)(int)>(::dlsym(lib, "fake_nvml_set_wait_mode"));
  ASSERT_NE(set_wait_mode, nullptr);
  const std::pair<int, const char*> modes[] = {
      {1, "success, event type 0x1"}, {2, "Fake Error (10)"}, {3, "nvmlEventSetWait failed: Fake Error (999)"}};
  for (const auto& [mode, said_by_mode] : modes) {
    SCOPED_TRACE(mode);
    const std::string said = said_by_mode;  // a named copy: clang 14 refuses a structured binding in a lambda
    set_wait_mode(mode);
    CaptureSink sink;
    NvmlSamplerOptions o;
    o.library = kFakeNvml;
    o.interval_ms = 1000;  // the sampling thread stays out of the way
    auto c = make_nvml_sampler(o);
    const int waits_before = fake_calls("wait", 0);
    timespec cpu0{}, cpu1{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
    ASSERT_TRUE(c->start(sink, {}).running);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    c->stop();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
    const int waits = fake_calls("wait", 0) - waits_before;
    const double cpu_s = static_cast<double>(cpu1.tv_sec - cpu0.tv_sec) + (cpu1.tv_nsec - cpu0.tv_nsec) * 1e-9;
    // One wait per 200 ms: about 5 in a second (a spinning thread makes hundreds of thousands).
    EXPECT_GE(waits, 3);
    EXPECT_LE(waits, 8);
    EXPECT_LT(cpu_s, 0.3) << "the process's CPU over one second of sampling";
    std::lock_guard lk(sink.mu_);
    EXPECT_TRUE(sink.events.empty());
    int noted = 0;
    for (auto& n : sink.notes) noted += n.rfind("nvml: XID events:", 0) == 0;  // gpu1 refuses registering: its own note
    EXPECT_EQ(noted, 1) << "what NVML returned, once";
    EXPECT_TRUE(std::any_of(sink.notes.begin(), sink.notes.end(),
                            [&](auto& n) { return n.find(said) != std::string::npos; }));
  }
  set_wait_mode(0);
  ::dlclose(lib);
}

// What changes slowly is read less often (NVML's calls cost 0.3-0.5 ms of CPU each on busy H200s): utilisation, power,
// temperature, SM clock and throttle reasons every round; energy, memory clock, ECC and the field values every
// slow_interval_ms; the per-process queries every process_interval_ms. The period may follow a live setting.
TEST(NvmlSampler, SlowQueriesAreReadLessOftenAndThePeriodCanFollowALiveSetting) {
  CaptureSink sink;
  NvmlSamplerOptions o;
  o.library = kFakeNvml;
  o.interval_ms = 10;
  o.slow_interval_ms = 100;
  o.process_interval_ms = 50;
  o.xid_events = false;
  auto live = std::make_shared<std::atomic<int>>(10);
  o.live_interval_ms = live;
  auto c = make_nvml_sampler(o);
  const int util0 = fake_calls("util", 0), fields0 = fake_calls("fields", 0), ecc0 = fake_calls("ecc", 0),
            proc0 = fake_calls("proc_util", 0), procmem0 = fake_calls("proc_mem", 0);
  ASSERT_TRUE(c->start(sink, {}).running);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const int util = fake_calls("util", 0) - util0, fields = fake_calls("fields", 0) - fields0,
            ecc = fake_calls("ecc", 0) - ecc0, proc = (fake_calls("proc_util", 0) - proc0) / 2,
            procmem = fake_calls("proc_mem", 0) - procmem0;
  // 60 rounds of 10 ms (fewer on a loaded machine): slow groups in about 1 of 10, per-process ones in 1 of 5.
  EXPECT_GE(util, 20);
  EXPECT_GE(fields, 2);
  EXPECT_LE(fields, util / 10 + 2) << util << " rounds";
  EXPECT_LE(ecc, 2 * (util / 10 + 2));  // corrected and uncorrected
  EXPECT_GE(proc, 3);                    // gpu0 runs processes: two calls a read (the count, then the samples)
  EXPECT_LE(proc, util / 5 + 2);
  EXPECT_LE(procmem, util / 5 + 2);
  // The live period: 100 ms rounds from now on.
  live->store(100);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the round asleep when it changed
  const int util1 = fake_calls("util", 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int slow_rounds = fake_calls("util", 0) - util1;
  c->stop();
  EXPECT_GE(slow_rounds, 3);
  EXPECT_LE(slow_rounds, 7) << "rounds in 500 ms at 100 ms";
  std::lock_guard lk(sink.mu_);
  EXPECT_GE(sink.count("gpu.ecc.corrected", "gpu0"), 2u);
  EXPECT_LT(sink.count("gpu.ecc.corrected", "gpu0") * 5, sink.count("gpu.util", "gpu0"));
  auto cost = std::find_if(sink.notes.begin(), sink.notes.end(),
                           [](auto& n) { return n.find("sampling round of 2 GPU(s)") != std::string::npos; });
  ASSERT_NE(cost, sink.notes.end());
  EXPECT_NE(cost->find("every 10-100 ms"), std::string::npos) << *cost;
  EXPECT_NE(cost->find("slow readings"), std::string::npos) << *cost;
}

namespace {
void fake_set_gpu0_processes(int on) {
  void* h = ::dlopen(kFakeNvml.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto fn = reinterpret_cast<void (*)(int)>(::dlsym(h, "fake_nvml_set_gpu0_processes"));
  ASSERT_NE(fn, nullptr);
  fn(on);
  ::dlclose(h);
}

// "process utilization on X of Y GPU reads" in the cost note `label` names ("" for the only one).
std::pair<int, int> utilization_reads(const std::vector<std::string>& notes, const std::string& label) {
  for (auto& n : notes)
    if (n.find("sampling round of 2 GPU(s)" + label + ":") != std::string::npos) {
      const auto at = n.find("process utilization on ");
      if (at == std::string::npos) return {-1, -1};
      int x = -1, y = -1;
      std::sscanf(n.c_str() + at, "process utilization on %d of %d GPU reads", &x, &y);
      return {x, y};
    }
  return {-1, -1};
}
}  // namespace

// The per-process utilization query (10 ms of CPU a round on 4 idle H200s) is made only on a GPU whose running-process
// list (0.13 ms) has an entry: an idle GPU has nothing to attribute. As soon as a process runs, it is made again.
TEST(NvmlSampler, ProcessUtilizationIsQueriedOnlyOnAGpuWithRunningProcesses) {
  void* lib = ::dlopen(kFakeNvml.c_str(), RTLD_NOW);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  fake_set_gpu0_processes(0);  // both GPUs idle
  CaptureSink sink;
  NvmlSamplerOptions o;
  o.library = kFakeNvml;
  o.interval_ms = 10;
  o.process_interval_ms = 10;  // the per-process group every round
  o.xid_events = false;
  auto c = make_nvml_sampler(o);
  const int list0[2] = {fake_calls("proc_mem", 0), fake_calls("proc_mem", 1)};
  const int util0[2] = {fake_calls("proc_util", 0), fake_calls("proc_util", 1)};
  ASSERT_TRUE(c->start(sink, {}).running);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int idle_lists = fake_calls("proc_mem", 0) - list0[0];
  EXPECT_GE(idle_lists, 5) << "the running-process list is still read on an idle GPU";
  EXPECT_GE(fake_calls("proc_mem", 1) - list0[1], 5);
  EXPECT_EQ(fake_calls("proc_util", 0), util0[0]) << "no process on gpu0: no utilization query";
  EXPECT_EQ(fake_calls("proc_util", 1), util0[1]) << "no process on gpu1: no utilization query";

  fake_set_gpu0_processes(1);  // two processes start on gpu0
  const int lists_at_start = fake_calls("proc_mem", 0), util_at_start = fake_calls("proc_util", 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int busy_lists = fake_calls("proc_mem", 0) - lists_at_start;
  const int busy_util_calls = fake_calls("proc_util", 0) - util_at_start;
  c->stop();
  fake_set_gpu0_processes(1);
  EXPECT_GE(busy_util_calls, 2 * 5) << "two calls a read (the count, then the samples)";
  EXPECT_GE(busy_util_calls, 2 * (busy_lists - 1)) << "a read after every list that had processes";
  EXPECT_EQ(fake_calls("proc_util", 1), util0[1]) << "gpu1 still has none";
  std::lock_guard lk(sink.mu_);
  EXPECT_GE(sink.count("gpu.proc.sm_util", "gpu0/pid4242"), 5u);
  EXPECT_GE(sink.count("gpu.proc.mem.used", "gpu0/pid4242"), 5u);
  // The note counts them: gpu0's reads once it had processes, of both GPUs' reads.
  const auto [with_util, reads] = utilization_reads(sink.notes, "");
  EXPECT_GE(with_util, 5);
  EXPECT_LE(with_util, busy_lists + 1);
  EXPECT_GE(reads, idle_lists + busy_lists);
  ::dlclose(lib);
}

// The agent's idle node: while live_idle is true the slow readings and field values come every idle_slow_interval_ms;
// the first round after it turns false reads them, and from then on every slow_interval_ms; back to the idle period
// when it turns true again. The cost note tells each schedule's rounds apart.
TEST(NvmlSampler, TheIdleScheduleReadsSlowGroupsRarelyAndAJobBringsThemBackAtOnce) {
  // Loaded before the first count: fake_calls reads a loaded library only (-1 before the sampler's own dlopen).
  void* lib = ::dlopen(kFakeNvml.c_str(), RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  CaptureSink sink;
  NvmlSamplerOptions o;
  o.library = kFakeNvml;
  o.interval_ms = 10;
  o.slow_interval_ms = 50;
  o.idle_slow_interval_ms = 60'000;
  o.process_interval_ms = 10;
  o.xid_events = false;
  auto idle = std::make_shared<std::atomic<bool>>(true);
  o.live_idle = idle;
  auto c = make_nvml_sampler(o);
  auto fields = [] { return fake_calls("fields", 0); };
  auto rounds = [] { return fake_calls("util", 0); };
  auto pcie = [] { return fake_calls("pcie", 0); };  // gpu0 has no PCIe byte counters: the 20 ms query, in turn
  const int fields0 = fields(), rounds0 = rounds(), pcie0 = pcie();
  ASSERT_TRUE(c->start(sink, {}).running);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const int idle_rounds = rounds() - rounds0, idle_fields = fields() - fields0;
  EXPECT_GE(idle_rounds, 10) << "the fast readings every round";
  EXPECT_EQ(idle_fields, 1) << "idle: the first round's read only (the next is due after 60 s)";
  EXPECT_GE(pcie() - pcie0, 2 * 3) << "gpu0 runs processes: its PCIe throughput every other round, idle or not";

  idle->store(false);  // a job is traced
  const int fields1 = fields(), rounds1 = rounds();
  for (int i = 0; i < 100 && fields() == fields1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_LE(rounds() - rounds1, 2) << "read in the first round of the job schedule";
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const int job_rounds = rounds() - rounds1, job_fields = fields() - fields1;
  EXPECT_GE(job_fields, 4) << job_rounds << " rounds";  // about 8 in 400 ms at 50 ms
  EXPECT_LE(job_fields, job_rounds / 5 + 2) << job_rounds << " rounds";

  idle->store(true);  // the job ended
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a round in flight may still be the job's
  const int fields2 = fields(), rounds2 = rounds();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const int idle_again_rounds = rounds() - rounds2;
  EXPECT_EQ(fields() - fields2, 0) << "idle again: none in " << idle_again_rounds << " rounds";
  EXPECT_GE(idle_again_rounds, 10);
  // Idle, and gpu0's processes gone: no PCIe throughput query on it (nothing on its link); a job brings it back.
  fake_set_gpu0_processes(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a round sees the empty list
  const int pcie_idle = pcie();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(pcie() - pcie_idle, 0) << "idle GPU on an idle node";
  idle->store(false);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_GE(pcie() - pcie_idle, 2 * 3) << "with a job every GPU's link is read, in turn";
  fake_set_gpu0_processes(1);
  c->stop();

  std::lock_guard lk(sink.mu_);
  auto note_of = [&](const std::string& label) {
    auto it = std::find_if(sink.notes.begin(), sink.notes.end(), [&](auto& n) {
      return n.find("sampling round of 2 GPU(s)" + label + ":") != std::string::npos;
    });
    return it == sink.notes.end() ? std::string() : *it;
  };
  const std::string idle_note = note_of(", idle schedule (no job traced)");
  const std::string job_note = note_of(", job schedule (a job traced)");
  EXPECT_NE(idle_note.find("slow readings and field values at most every 60000 ms"), std::string::npos) << idle_note;
  EXPECT_NE(job_note.find("slow readings and field values at most every 50 ms"), std::string::npos) << job_note;
  const auto n_of = [](const std::string& n) {
    const auto at = n.find(" on average over ");
    return at == std::string::npos ? -1 : std::atoi(n.c_str() + at + 17);
  };
  EXPECT_GE(n_of(idle_note), idle_rounds + idle_again_rounds - 2) << idle_note;
  EXPECT_GE(n_of(job_note), job_rounds - 2) << job_note;
  EXPECT_EQ(note_of("").size(), 0u) << "one note a schedule, each named";
  const std::string start = *std::find_if(sink.notes.begin(), sink.notes.end(), [](auto& n) {
    return n.find("sampling 2 GPU(s) every") != std::string::npos;
  });
  EXPECT_NE(start.find("every 60000 ms while the node is idle"), std::string::npos) << start;
  ::dlclose(lib);
}
