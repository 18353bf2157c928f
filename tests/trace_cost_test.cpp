// Probe cost (src/trace): uprobe_multi links attach and detach a family's probes in one call each;
// asynchronous CUDA calls are probed at entry only yet counted exactly; --detail full keeps durations; the cost
// budget duty-cycles a hot family, marks the watched windows and states the fraction to scale counts by.
// Against the fake libraries in tests/progs/trace_fake (libcudart/libcuda, a libtorch_cpu with 200 operators), and
// Debian's python3-torch against torch.profiler (tests/data/torch_op_counts.py).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <regex>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "memory_sink.h"
#include "subject_process.h"
#include "test_util.h"
#include "model/clock.h"
#include "trace/symbol_names.h"
#include "trace/uprobe_tracer.h"

using namespace stackscope;
using namespace stackscope::trace;
using namespace std::chrono_literals;

namespace {

const std::string kFakeApp = std::string(STACKSCOPE_BUILD_DIR) + "/tests/progs/trace_fake_app";
const std::string kFakeOps = std::string(STACKSCOPE_BUILD_DIR) + "/tests/progs/trace_fake_ops";

#define REQUIRE_ROOT()                                                                             \
  do {                                                                                             \
    STACKSCOPE_REQUIRE(geteuid() == 0, "needs root to load eBPF programs and attach uprobes"); \
  } while (0)

std::vector<Event> named(const stackscope::testing::MemorySink& sink, const std::string& name, uint32_t pid) {
  std::vector<Event> out;
  for (auto& e : sink.events())
    if (e.name == name && e.pid == pid) out.push_back(e);
  return out;
}

std::string all_notes(const stackscope::testing::MemorySink& sink) {
  std::string s;
  for (auto& n : sink.notes()) s += n.text + "\n";
  return s;
}

// Attaches the torch layer to the fake libtorch_cpu's 200 operators, makes 1000 + 1 calls, and returns how long
// release() took to detach everything.
double attach_count_and_detach(bool uprobe_multi, size_t* links) {
  Subject app({kFakeOps, "calls", "1000"});
  EXPECT_NE(app.expect("ready"), "");
  TracerOptions topts;
  topts.full_detail = true;  // one event per call
  topts.uprobe_multi = uprobe_multi;
  stackscope::testing::MemorySink sink;
  UprobeTracer tracer({Layer::torch}, topts);
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(app.pid())};
  opts.torch_ops = {"op*"};
  EXPECT_TRUE(tracer.start(sink, opts).running);
  EXPECT_TRUE(tracer.wait_until_attached(app.pid(), Layer::torch, 30s)) << all_notes(sink);
  *links = tracer.stats().links;
  EXPECT_EQ(tracer.stats().uprobe_multi, uprobe_multi);
  app.send("go");
  EXPECT_NE(app.expect("done"), "");
  EXPECT_EQ(app.wait(), 0);
  tracer.stop();
  EXPECT_EQ(named(sink, "aten::op10", app.pid()).size(), 1000u) << all_notes(sink);
  EXPECT_EQ(named(sink, "aten::op11", app.pid()).size(), 1u);
  auto t0 = std::chrono::steady_clock::now();
  tracer.release();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// 200 operators: one entry link and one return link; detaching them takes well under a second. Single uprobes (the
// fallback for kernels before 6.6) are timed beside it for docs/benchmarks/probe-cost.md.
TEST(TraceCost, TwoHundredProbesAreOneLinkPerProgramAndDetachUnderASecond) {
  REQUIRE_ROOT();
  size_t links = 0;
  const double multi_s = attach_count_and_detach(true, &links);
  EXPECT_EQ(links, 2u) << "200 entry probes and 200 return probes: one uprobe_multi link each";
  EXPECT_LT(multi_s, 1.0);
  std::printf("detach of 200 entry + 200 return probes: uprobe_multi %.3f s (%zu links)\n", multi_s, links);
  if (!std::getenv("STACKSCOPE_COMPARE_SINGLE_UPROBES")) return;  // ~40 s here: for docs/benchmarks/probe-cost.md only
  size_t single_links = 0;
  const double single_s = attach_count_and_detach(false, &single_links);
  EXPECT_EQ(single_links, 400u);
  std::printf("single uprobes: %.3f s (%zu links)\n", single_s, single_links);
}

// --detail budgeted without a budget: launches probed at entry only are instants without a return value, and each
// is counted once: the driver launch under each runtime launch is folded by its return address, the direct driver
// launches are kept. Blocking calls keep their return probe and duration.
TEST(TraceCost, EntryOnlyLaunchesCountedExactly) {
  REQUIRE_ROOT();
  Subject app({kFakeApp, "launches", "2000"});
  ASSERT_NE(app.expect("ready"), "");
  TracerOptions topts;
  topts.budget_pct = 0;
  stackscope::testing::MemorySink sink;
  UprobeTracer tracer({Layer::cuda}, topts);
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(app.pid())};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(app.pid(), Layer::cuda, 20s)) << all_notes(sink);
  app.send("go");
  ASSERT_NE(app.expect("done"), "");
  EXPECT_EQ(app.wait(), 0);
  const uint32_t pid = app.pid();
  ASSERT_TRUE(eventually([&] { return !named(sink, "cudaStreamSynchronize", pid).empty(); }));
  tracer.stop();
  auto launches = named(sink, "cudaLaunchKernel", pid);
  EXPECT_EQ(launches.size(), 2000u) << all_notes(sink);
  size_t instants = 0, with_ret = 0;
  for (auto& e : launches) {
    instants += (e.flags & kEventInstant) && (e.flags & kEventHostEnqueue) && e.duration_ns == 0;
    with_ret += e.arg("ret") != nullptr;
  }
  EXPECT_EQ(instants, 2000u);
  EXPECT_EQ(with_ret, 0u);
  EXPECT_EQ(named(sink, "cuLaunchKernel", pid).size(), 1000u) << "only the direct driver launches";
  auto syncs = named(sink, "cudaStreamSynchronize", pid);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_GE(syncs[0].duration_ns, 1'500'000);
  EXPECT_TRUE(named(sink, "cuStreamSynchronize", pid).empty());
}

// --detail full: the same calls, each with its return probe: durations and return values, counts exact.
TEST(TraceCost, FullDetailKeepsDurationsAndExactCounts) {
  REQUIRE_ROOT();
  Subject app({kFakeApp, "launches", "2000"});
  ASSERT_NE(app.expect("ready"), "");
  TracerOptions topts;
  topts.full_detail = true;
  stackscope::testing::MemorySink sink;
  UprobeTracer tracer({Layer::cuda}, topts);
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(app.pid())};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(app.pid(), Layer::cuda, 20s)) << all_notes(sink);
  app.send("go");
  ASSERT_NE(app.expect("done"), "");
  EXPECT_EQ(app.wait(), 0);
  const uint32_t pid = app.pid();
  ASSERT_TRUE(eventually([&] { return !named(sink, "cudaStreamSynchronize", pid).empty(); }));
  tracer.stop();
  auto launches = named(sink, "cudaLaunchKernel", pid);
  EXPECT_EQ(launches.size(), 2000u) << all_notes(sink);
  size_t timed = 0;
  for (auto& e : launches) timed += !(e.flags & kEventInstant) && e.duration_ns > 0 && e.arg_int("ret", -1) == 0;
  EXPECT_EQ(timed, 2000u);
  EXPECT_EQ(named(sink, "cuLaunchKernel", pid).size(), 1000u);
  EXPECT_EQ(sink.find("trace.cuda.watching"), nullptr) << "no budget in full detail";
}

// An operator called ~10 k times a second costs far more than 1 % of its process: the budget attaches the torch
// probes for a share of each period. The watching series alternates, the operator counts in the kernel-aggregated
// series cover only watched time, and scaled by the watched fraction they give the true count.
TEST(TraceCost, BudgetDutyCyclesHotFamilyAndCountsScale) {
  REQUIRE_ROOT();
  Subject app({kFakeOps, "hot", "6", "100"});
  ASSERT_NE(app.expect("ready"), "");
  TracerOptions topts;
  topts.budget_pct = 1;
  topts.budget_period_ms = topts.budget_max_period_ms = 300;  // a fixed period: windows enough in a few seconds
  stackscope::testing::MemorySink sink;
  UprobeTracer tracer({Layer::torch}, topts);
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(app.pid())};
  opts.torch_ops = {"op*"};
  opts.interval_ms = 100;
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(app.pid(), Layer::torch, 20s)) << all_notes(sink);
  const int64_t t_go = monotonic_ns();
  app.send("go");
  const std::string done = app.expect("done", 60s);
  const int64_t t_done = monotonic_ns();
  ASSERT_NE(done, "");
  EXPECT_EQ(app.wait(), 0);
  const double true_calls = std::stod(done.substr(5));
  tracer.stop();
  EXPECT_GT(tracer.hit_cost_ns(), 0);

  auto watching_info = sink.find("trace.torch.watching");
  ASSERT_NE(watching_info, nullptr);
  auto watching = sink.samples_of(watching_info->id);
  int ons = 0, offs = 0;
  double watched_ns = 0;  // inside [t_go, t_done]
  for (size_t i = 0; i < watching.size(); ++i) {
    ons += watching[i].value == 1 && i > 0;
    offs += watching[i].value == 0;
    if (watching[i].value != 1) continue;
    int64_t a = watching[i].t_ns, b = i + 1 < watching.size() ? watching[i + 1].t_ns : t_done;
    a = std::max(a, t_go);
    b = std::min(b, t_done);
    if (b > a) watched_ns += static_cast<double>(b - a);
  }
  EXPECT_GE(offs, 5) << "detached at least 5 times in 6 s: " << all_notes(sink);
  EXPECT_GE(ons, 5);
  const double fraction = watched_ns / static_cast<double>(t_done - t_go);
  EXPECT_LT(fraction, 0.8);
  EXPECT_GT(fraction, 0.0);

  auto calls_info = sink.find("torch.op.calls", "aten::op10");
  ASSERT_NE(calls_info, nullptr) << all_notes(sink);
  auto calls = sink.samples_of(calls_info->id);
  ASSERT_FALSE(calls.empty());
  const double recorded = calls.back().value;
  const double estimate = recorded / fraction;
  const std::string notes = all_notes(sink);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(notes, m, std::regex("torch: probes watched ([0-9.]+)% .*error of the scaled counts "
                                                     "about ([0-9]+)%"))) << notes;
  const double stated_error = std::stod(m[2]) / 100;
  const double error = std::abs(estimate / true_calls - 1);
  std::printf("%.0f calls, %.0f recorded in %.1f%% watched time -> %.0f (error %.1f%%, stated %.0f%%; budget note: "
              "%s%% of the recording)\n", true_calls, recorded, 100 * fraction, estimate, 100 * error,
              100 * stated_error, m[1].str().c_str());
  std::printf("measured cost per probe hit: %.0f ns\n", tracer.hit_cost_ns());
  // The stated error is the sampling error; the probes also slow the calls they watch (~2 hits x cost per call in
  // 100 us), an undercount of a few % more.
  EXPECT_LE(error, std::max(stated_error, 0.05) + 0.10) << notes;

  // The estimate the recording states (model/sampled_count.h, from the job's CPU time), on an operator 100x longer
  // than a trap, where the probes hardly slow the calls: the truth within its stated error. The count at the first
  // detach is whole (the tracer samples the operators as it closes a counted window).
  std::smatch e;
  ASSERT_TRUE(std::regex_search(notes, e, std::regex("torch: estimated calls: counts made after the first detach, "
                                                     "[0-9.]+ s into the recording, scale by ([0-9.e+]+) \\(error "
                                                     "about ([0-9]+)%"))) << notes;
  const double scale = std::stod(e[1]), cpu_error = std::stod(e[2]) / 100;
  int64_t t_detach = 0, t_reopen = 0;
  for (auto& w : watching) {
    if (!t_detach && w.value == 0) t_detach = w.t_ns;
    if (t_detach && !t_reopen && w.value == 1 && w.t_ns > t_detach) t_reopen = w.t_ns;
  }
  double whole = 0;
  for (auto& c : calls)
    if (c.t_ns < (t_reopen ? t_reopen : t_done)) whole = c.value;
  const double by_cpu = whole + (recorded - whole) * scale;
  std::printf("from CPU time: %.0f whole + %.0f later x %.4g -> %.0f (error %+.1f%%, stated %.0f%%)\n", whole,
              recorded - whole, scale, by_cpu, 100 * (by_cpu / true_calls - 1), 100 * cpu_error);
  EXPECT_LE(std::abs(by_cpu / true_calls - 1), cpu_error + 0.10) << notes;  // a 95 % interval: as below
}

// Under the budget a hot CUDA family is duty-cycled, but its blocking calls are not: every synchronisation is
// recorded (the job's step cadence stays exact) while the launches are sampled, and the steady probes' hits are
// counted apart from the cycled ones.
TEST(TraceCost, BudgetKeepsSynchronisationsExact) {
  REQUIRE_ROOT();
  Subject app({kFakeApp, "steps", "4", "400"});
  ASSERT_NE(app.expect("ready"), "");
  TracerOptions topts;
  topts.budget_pct = 1;
  topts.budget_period_ms = topts.budget_max_period_ms = 300;  // a fixed period: windows enough in a few seconds
  stackscope::testing::MemorySink sink;
  UprobeTracer tracer({Layer::cuda}, topts);
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(app.pid())};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(app.pid(), Layer::cuda, 20s)) << all_notes(sink);
  app.send("go");
  const std::string done = app.expect("done", 60s);
  ASSERT_NE(done, "");
  EXPECT_EQ(app.wait(), 0);
  long steps = 0, launches = 0;
  ASSERT_EQ(std::sscanf(done.c_str(), "done %ld %ld", &steps, &launches), 2) << done;
  const uint32_t pid = app.pid();
  ASSERT_TRUE(eventually([&] { return named(sink, "cudaStreamSynchronize", pid).size() >= static_cast<size_t>(steps); }))
      << named(sink, "cudaStreamSynchronize", pid).size() << " of " << steps << "\n" << all_notes(sink);
  tracer.stop();
  auto watching_info = sink.find("trace.cuda.watching");
  ASSERT_NE(watching_info, nullptr) << all_notes(sink);
  int offs = 0;
  for (auto& s : sink.samples_of(watching_info->id)) offs += s.value == 0;
  EXPECT_GE(offs, 3) << "the launches were duty-cycled: " << all_notes(sink);
  const size_t recorded_launches = named(sink, "cudaLaunchKernel", pid).size();
  EXPECT_LT(recorded_launches, static_cast<size_t>(launches) * 9 / 10);
  auto syncs = named(sink, "cudaStreamSynchronize", pid);
  EXPECT_EQ(syncs.size(), static_cast<size_t>(steps)) << "every synchronisation, watched or not";
  for (auto& e : syncs) EXPECT_GE(e.duration_ns, 1'500'000);
  EXPECT_TRUE(named(sink, "cuStreamSynchronize", pid).empty()) << "folded into the runtime call";
  std::printf("%ld steps, %ld launches: %zu syncs and %zu launches recorded\n", steps, launches, syncs.size(),
              recorded_launches);
}

// The toggles are priced too: a hot family's probes trap while its links are being attached and detached, outside
// the watched windows. Those hits are counted per attach/detach cycle and charged to the family's share; where they
// cost more than a quarter of it, the period is lengthened (here to its cap) rather than the job paying for a
// toggle every period. A price of 1 ms a hit makes any hit outside the windows expensive.
TEST(TraceCost, BudgetPricesTogglesAndLengthensThePeriod) {
  REQUIRE_ROOT();
  Subject app({kFakeOps, "hot", "6", "20"});
  ASSERT_NE(app.expect("ready"), "");
  TracerOptions topts;
  topts.budget_pct = 1;
  topts.budget_period_ms = 300;
  topts.budget_max_period_ms = 4000;
  topts.hit_cost_ns = 1e6;
  // Every site in every window: restricted to the one hot operator (the hit set), a window's toggles trap almost no
  // calls of this job, and the period rightly stays short; the price of toggles is what this test is about.
  topts.torch_hit_set = false;
  stackscope::testing::MemorySink sink;
  UprobeTracer tracer({Layer::torch}, topts);
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(app.pid())};
  opts.torch_ops = {"op*"};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(app.pid(), Layer::torch, 20s)) << all_notes(sink);
  app.send("go");
  ASSERT_NE(app.expect("done", 60s), "");
  EXPECT_EQ(app.wait(), 0);
  tracer.stop();
  const auto stats = tracer.stats();
  // Calls that enter between the pause and the entry probes' removal are gated (counted, not reported). How many
  // depends on how long the removal takes: 0-32 a run on the CPU VM (570-6,625 if the tracer kept each library
  // mapped: one more mapping for the kernel to walk at each detach), so their number is printed, not required.
  const std::string notes = all_notes(sink);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(notes, m, std::regex("torch: probes watched [0-9.]+% .*\\(([0-9]+) window\\(s\\).*"
                                                     "last period ([0-9]+) ms; ([0-9.]+) probe hits per attach/detach "
                                                     "cycle outside the watched windows")))
      << notes;
  const int windows = std::stoi(m[1]), period_ms = std::stoi(m[2]);
  const double off_hits = std::stod(m[3]);
  std::printf("%d window(s), last period %d ms, %.0f hits per cycle outside the windows, %lu hits, %lu gated\n",
              windows, period_ms, off_hits, static_cast<unsigned long>(stats.hits),
              static_cast<unsigned long>(stats.gated));
  EXPECT_GT(off_hits, 0);
  EXPECT_EQ(period_ms, 4000) << "toggles priced at >= 1 ms of CPU a cycle against a share of ~10 ms/s: the cap";
  EXPECT_LE(windows, 6) << "at a fixed 300 ms period there would be about 20";
  EXPECT_GE(windows, 1);
}

namespace {

// Event counts of one process by name, the torch layer only.
std::map<std::string, size_t> torch_counts(const stackscope::testing::MemorySink& sink, uint32_t pid) {
  std::map<std::string, size_t> counts;
  for (auto& e : sink.events())
    if (e.layer == Layer::torch && e.pid == pid) ++counts[e.name];
  return counts;
}

// The profiler names operators without their overload (aten::add); the probes name the one probed (aten::add.Tensor).
const std::vector<std::pair<std::string, std::string>> kProfilerToProbe = {
    {"aten::matmul", "aten::matmul"}, {"aten::mm", "aten::mm"}, {"aten::tanh", "aten::tanh"},
    {"aten::add", "aten::add.Tensor"}};
const std::vector<std::string> kLoopOps = {"matmul", "mm", "tanh", "add_Tensor"};

}  // namespace

// The tiny-operator loop (tests/data/torch_op_counts.py) on Debian's torch 1.13 (CPU), counted by torch.profiler
// inside the process and by the torch probes outside it: in --detail full every operator call is one event, so the
// counts are equal.
TEST(TraceCost, FullDetailTorchOpCountsEqualTorchProfiler) {
  REQUIRE_ROOT();
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import torch'") == 0, "no python3-torch");
  Subject py({"/usr/bin/python3", std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data/torch_op_counts.py", "profile",
              "300"});
  ASSERT_NE(py.expect("ready", 120s), "");
  TracerOptions topts;
  topts.full_detail = true;
  stackscope::testing::MemorySink sink;
  UprobeTracer tracer({Layer::torch}, topts);
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(py.pid())};
  opts.torch_ops = kLoopOps;
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(py.pid(), Layer::torch, 60s)) << all_notes(sink);
  py.send("go");
  const std::string done = py.expect("done", 120s);
  ASSERT_NE(done, "");
  EXPECT_EQ(py.wait(), 0);
  const auto profiler = nlohmann::json::parse(done.substr(5))["counts"];
  const uint32_t pid = py.pid();
  const size_t want = profiler["aten::add"].get<size_t>();
  ASSERT_TRUE(eventually([&] { return torch_counts(sink, pid)["aten::add.Tensor"] >= want; }, 20s))
      << torch_counts(sink, pid)["aten::add.Tensor"] << " of " << want;
  tracer.stop();
  auto counts = torch_counts(sink, pid);
  for (auto& [prof_name, probe_name] : kProfilerToProbe) {
    EXPECT_EQ(counts[probe_name], profiler[prof_name].get<size_t>()) << prof_name << "\n" << all_notes(sink);
    std::printf("%s: torch.profiler %zu, probes %zu\n", prof_name.c_str(), profiler[prof_name].get<size_t>(),
                counts[probe_name]);
  }
}

namespace {

// Runs tests/data/torch_op_counts.py with `args` under the torch layer and a cost budget, and checks each operator's
// estimate (the whole count until the first detach plus the later counts scaled as the end note says) against
// torch.profiler's count (calls per iteration x iterations): within the error the recording states. Returns the
// largest error; `notes_out` gets the recording's notes. With `outside`, a count outside its stated error (plus
// slack) sets it instead of failing the test, so that a caller may judge a second, independent run.
// `torch_ops`: the operators probed; `extra`: more checks on the recording (the sink and the loop's "done" JSON).
double check_budgeted_torch_counts(
    const std::vector<std::string>& args, std::string* notes_out, double budget_pct = 1, bool* outside = nullptr,
    const std::vector<std::string>& torch_ops = kLoopOps,
    const std::function<void(const stackscope::testing::MemorySink&, const nlohmann::json&)>& extra = {}) {
  double worst = -1;
  [&] {
    std::vector<std::string> argv{"/usr/bin/python3",
                                  std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data/torch_op_counts.py"};
    argv.insert(argv.end(), args.begin(), args.end());
    Subject py(argv);
    ASSERT_NE(py.expect("ready", 120s), "");
    TracerOptions topts;
    topts.budget_pct = budget_pct;
    topts.budget_period_ms = topts.budget_max_period_ms = 300;  // a fixed period: windows enough in a few seconds
    // Every site in every window (STACKSCOPE_TORCH_EVERY_SITE): for comparisons only (the hit-set test then fails).
    topts.torch_hit_set = !std::getenv("STACKSCOPE_TORCH_EVERY_SITE");
    stackscope::testing::MemorySink sink;
    UprobeTracer tracer({Layer::torch}, topts);
    CollectorOptions opts;
    opts.pids = {static_cast<uint32_t>(py.pid())};
    opts.torch_ops = torch_ops;
    opts.interval_ms = 100;
    ASSERT_TRUE(tracer.start(sink, opts).running);
    ASSERT_TRUE(tracer.wait_until_attached(py.pid(), Layer::torch, 60s)) << all_notes(sink);
    const int64_t t_go = monotonic_ns();
    py.send("go");
    const std::string done = py.expect("done", 120s);
    const int64_t t_done = monotonic_ns();
    ASSERT_NE(done, "");
    EXPECT_EQ(py.wait(), 0);
    tracer.stop();
    const auto out = nlohmann::json::parse(done.substr(5));
    const double iterations = out["iterations"].get<double>();

    // The probes were attached at import and stay fully attached (every call counted) until the budget first detaches
    // them, after the loop began: the count until then is whole. After it the kernel counts only inside the watched
    // windows (trace.torch.watching), and that part is scaled by the windows' share of the time, as the end note says.
    const std::string notes = all_notes(sink);
    *notes_out = notes;
    auto watching_info = sink.find("trace.torch.watching");
    ASSERT_NE(watching_info, nullptr) << notes;
    auto watching = sink.samples_of(watching_info->id);
    int64_t t_cycled = 0, t_reopened = 0;  // the first detach after the loop began; the next window's start
    for (auto& w : watching) {
      if (!t_cycled && w.value == 0 && w.t_ns > t_go) t_cycled = w.t_ns;
      if (t_cycled && !t_reopened && w.value == 1 && w.t_ns > t_cycled) t_reopened = w.t_ns;
    }
    ASSERT_GT(t_cycled, 0) << notes;
    ASSERT_LT(t_cycled, t_done) << notes;
    double watched_ns = 0;  // inside [t_cycled, t_done]
    int offs = 0;
    for (size_t i = 0; i < watching.size(); ++i) {
      offs += watching[i].value == 0;
      if (watching[i].value != 1) continue;
      int64_t a = std::max(watching[i].t_ns, t_cycled), b = i + 1 < watching.size() ? watching[i + 1].t_ns : t_done;
      b = std::min(b, t_done);
      if (b > a) watched_ns += static_cast<double>(b - a);
    }
    EXPECT_GE(offs, 5) << "duty-cycled: " << notes;
    const double fraction = watched_ns / static_cast<double>(t_done - t_cycled);
    ASSERT_GT(fraction, 0.0);
    EXPECT_LT(fraction, 0.5);
    // The estimate the recording states (model/sampled_count.h): counts made after the first detach scale by a factor
    // from the job's CPU time, with its error.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(notes, m, std::regex("torch: estimated calls: counts made after the first detach, "
                                                       "[0-9.]+ s into the recording, scale by ([0-9.e+]+) \\(error "
                                                       "about ([0-9]+)%.*wall time would say ([0-9.e+]+)"))) << notes;
    const double scale = std::stod(m[1]), stated_error = std::stod(m[2]) / 100, wall_scale = std::stod(m[3]);
    std::smatch fit;  // what the estimate's fit found (for a reader of a failure)
    if (std::regex_search(notes, fit, std::regex("estimator: [a-z]+; [^;]*;[^;]*")))
      std::printf("%s\n", fit[0].str().c_str());
    // The estimate the note did not use (the CPU time's, or the synchronisations'), for comparison only.
    std::smatch o;
    const bool has_other = std::regex_search(
        notes, o, std::regex("(CPU time|synchronisations) would say ([0-9.e+]+) \\(error about ([0-9]+)%"));
    const double other_scale = has_other ? std::stod(o[2]) : 0;
    // The end note's share for the duty-cycled part, which the whole-recording factor (attached since import) is not.
    std::smatch c;
    ASSERT_TRUE(std::regex_search(notes, c, std::regex("torch: fully attached .* then duty-cycled for [0-9.]+ s and "
                                                       "watched ([0-9.]+)% of that time"))) << notes;
    const double cycled = std::stod(c[1]) / 100;
    int64_t after_done_watched = 0;  // watched time after the loop ended (the job exiting), from the series
    for (size_t i = 0; i < watching.size(); ++i)
      if (watching[i].value == 1 && i + 1 < watching.size() && watching[i + 1].t_ns > t_done)
        after_done_watched += watching[i + 1].t_ns - std::max(watching[i].t_ns, t_done);
    std::printf("loop %.1f s, fully attached for its first %.2f s, then watched %.2f%% (watching series; end note "
                "%.2f%%; %.2f s watched after the loop ended); scale %.4g +- %.0f%% (wall time: %.4g)\n",
                static_cast<double>(t_done - t_go) / 1e9, static_cast<double>(t_cycled - t_go) / 1e9, 100 * fraction,
                100 * cycled, static_cast<double>(after_done_watched) / 1e9, scale, 100 * stated_error, wall_scale);
    EXPECT_GT(stated_error, 0.0);
    // The note's factor is (counted + entry-only + unwatched calls) / counted calls, its counted calls being the
    // probe hits of the counted windows since the budget's first detach over two. The operators' series are what a
    // reader scales: every probed operator's counts since that detach must be those calls, so that they times the
    // factor give the note's estimate (a GPU loop's counts x the factor can read low, 15.7 % on one: this check
    // rules out series that lost calls the note counted).
    {
      std::smatch b;
      ASSERT_TRUE(std::regex_search(notes, b, std::regex("; ([0-9]+) calls counted, ([0-9]+) in entry-only windows, "
                                                         "([0-9]+) estimated unwatched"))) << notes;
      const double note_counted = std::stod(b[1]), note_total = note_counted + std::stod(b[2]) + std::stod(b[3]);
      int64_t first_detach = 0, next_open = 0;
      for (auto& w : watching) {
        if (!first_detach && w.value == 0) first_detach = w.t_ns;
        if (first_detach && !next_open && w.value == 1 && w.t_ns > first_detach) next_open = w.t_ns;
      }
      ASSERT_GT(next_open, 0) << notes;
      double since_detach = 0;
      for (auto& info : sink.series())
        if (info.name == "torch.op.calls") {
          double at_detach = 0, last = 0;
          for (auto& x : sink.samples_of(info.id)) {
            if (x.t_ns < next_open) at_detach = x.value;
            last = x.value;
          }
          since_detach += last - at_detach;
        }
      std::smatch h;
      ASSERT_TRUE(std::regex_search(notes, h, std::regex("probe hits over two say ([0-9]+)"))) << notes;
      const double hits_counted = std::stod(h[1]);
      std::printf("every probed operator's counts since the first detach %.0f, the note's calls counted %.0f (%+.2f%%; "
                  "by its probe hits %.0f, %+.2f%%); x %.4g = %.0f, the note's estimate %.0f\n", since_detach,
                  note_counted, 100 * (since_detach / note_counted - 1), hits_counted,
                  100 * (since_detach / hits_counted - 1), scale, since_detach * scale, note_total);
      // The note's factor is for the series: exact but for the note's rounding (4 digits of the factor).
      EXPECT_NEAR(since_detach, note_counted, 1.0) << notes;
      EXPECT_NEAR(since_detach * scale / note_total, 1.0, 1e-3) << notes;
      // The windows' probe hits over two also count halves of the calls cut at a window's edges: a few per window.
      EXPECT_NEAR(since_detach / hits_counted, 1.0, 0.03) << notes;
    }
    for (auto& [prof_name, probe_name] : kProfilerToProbe) {
      auto info = sink.find("torch.op.calls", probe_name);
      ASSERT_NE(info, nullptr) << probe_name << "\n" << notes;
      auto calls = sink.samples_of(info->id);
      ASSERT_FALSE(calls.empty());
      // The count at the first detach: the tracer samples the operators as it closes a counted window, and nothing is
      // counted until the next one opens, so it is the last sample before that.
      double whole = -1;
      for (auto& s : calls)
        if (s.t_ns < (t_reopened ? t_reopened : t_done)) whole = s.value;
      ASSERT_GE(whole, 0) << "no operator sample before the first counted window after the first detach";
      const double truth = out["per_iteration"][prof_name].get<double>() * iterations;
      const double estimate = whole + (calls.back().value - whole) * scale,
                   by_wall = whole + (calls.back().value - whole) * wall_scale;
      const double error = estimate / truth - 1;
      std::printf("%s: torch.profiler %.0f (%.0f iterations), probes %.0f whole + %.0f in windows -> %.0f (error "
                  "%+.1f%%, stated %.0f%%; by watched wall time %.0f, %+.1f%%)\n", prof_name.c_str(), truth,
                  iterations, whole, calls.back().value - whole, estimate, 100 * error, 100 * stated_error, by_wall,
                  100 * (by_wall / truth - 1));
      if (has_other)
        std::printf("  the %s would say %.0f (error %+.1f%%, stated %s%%)\n", o[1].str().c_str(),
                    whole + (calls.back().value - whole) * other_scale,
                    100 * ((whole + (calls.back().value - whole) * other_scale) / truth - 1), o[3].str().c_str());
      // The truth must lie within the error the recording states. That error is a 95 % interval (it missed 1 run of
      // 12 on the shared VM, by 5 points); 10 points of slack keep the test from failing one run in twenty.
      if (outside && std::abs(error) > stated_error + 0.10)
        *outside = true;
      else
        EXPECT_LE(std::abs(error), stated_error + 0.10) << prof_name << "\n" << notes;
      worst = std::max(worst, std::abs(error));
    }
    if (extra) extra(sink, out);
  }();
  return worst;
}

}  // namespace

// The same loop under the default detail and a cost budget: the torch family is duty-cycled, operators are counted
// in the kernel while watched; the whole count until the first detach plus the later counts scaled as the end note
// says estimate the profiler's count (calls per iteration x iterations), within the error the recording states.
// Scaling by watched wall time is 60-70 % low here (the probes slow the calls they watch); the note's factor comes
// from the job's CPU time (model/sampled_count.h).
TEST(TraceCost, BudgetedTorchOpCountsScaleToTorchProfiler) {
  REQUIRE_ROOT();
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import torch'") == 0, "no python3-torch");
  std::string notes;
  // The stated error is a 95 % interval and the CPU-time estimate misses it in about 1 run of 12 on this shared VM:
  // one miss is followed by a second, independent recording that must hold (both missing by
  // more than the slack: about 1 in 150 if the interval is right).
  bool outside = false;
  check_budgeted_torch_counts({"timed", "6"}, &notes, 1, &outside);
  if (outside) {
    std::printf("outside the stated error once: a second recording\n");
    check_budgeted_torch_counts({"timed", "6"}, &notes);
  }
  EXPECT_EQ(notes.find("estimator: syncs"), std::string::npos) << "no synchronisation in this loop: " << notes;
  // The loop's four operators split into halves and quarters by id: the entry-only windows trap half and a quarter
  // of the calls, not every call and half (model/sampled_count.h).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(notes, m, std::regex("entry traps only; ([0-9]+)% and ([0-9]+)% of the calls trapped")))
      << notes;
  EXPECT_LT(std::stoi(m[1]), 100);
  EXPECT_LT(std::stoi(m[2]), std::stoi(m[1]));
  EXPECT_GT(std::stoi(m[2]), 0);
}

// A GPU job's loop on the CPU: each iteration of the same tiny operators ends with a blocking cudaStreamSynchronize
// (the fake libcudart.so.13) and spins to a fixed period, as a host waiting on a GPU does; watched, the probes' traps
// make the iteration overrun the period. Its CPU time then follows the period, not its calls (on the H100 the CPU
// estimate was -41.6 %, stated 3,211 %, on small-batch inference): the end note's estimate is the synchronisations'
// (model/sampled_count.h, estimate_from_sync_intervals), within the error it states; the CPU time's figure is printed.
TEST(TraceCost, BudgetedTorchOpCountsOfASyncedLoopFollowItsSyncs) {
  REQUIRE_ROOT();
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import torch'") == 0, "no python3-torch");
  std::string notes;
  // A 5 % budget: windows of 15-45 ms, a few steps each on the shared VM (at 1 %, 2.5-7.5 ms windows held one step
  // and too few intervals for the estimate; on a GPU the default budget's windows hold hundreds).
  const double worst = check_budgeted_torch_counts(
      {"synced", "8", std::string(STACKSCOPE_BUILD_DIR) + "/tests/progs/fakegpu/libcudart.so.13", "4"}, &notes, 5);
  EXPECT_NE(notes.find("estimator: syncs"), std::string::npos) << notes;
  std::smatch m;
  if (std::regex_search(notes, m, std::regex("the job's CPU time would say ([0-9.e+]+) \\(error about ([0-9]+)%")))
    std::printf("largest error %.1f%%; the CPU time's estimate would have scaled by %s (stated error %s%%)\n",
                100 * worst, m[1].str().c_str(), m[2].str().c_str());
}

// Budgeted windows attach only the operators counted so far (a uprobe_multi detach costs per probed site: 340 sites
// make every window's detach 180 ms on the H200, stretching the period to 12-20 s). The loop probed with the default
// operator list (tens of sites, four of them called): after the first detach, windows hold the hit set only, every
// 8th holds every site, and the operator that the loop starts calling 3 s in (torch.relu, every 10th iteration) is
// found by one of those and counted in the restricted windows after it. The loop's operators still land within the
// error the recording states.
TEST(TraceCost, BudgetedTorchWindowsAttachTheHitSetAndFindLateOperators) {
  REQUIRE_ROOT();
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import torch'") == 0, "no python3-torch");
  std::string notes;
  auto hit_set = [](const stackscope::testing::MemorySink& sink, const nlohmann::json& out) {
    const std::string notes = all_notes(sink);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        notes, m, std::regex("torch: windows after the first detach attach only the probe sites of the operators "
                             "counted so far \\(the hit set: ([0-9]+) operator\\(s\\) of the ([0-9]+) sites probed "
                             "now\\): ([0-9]+) such window\\(s\\) held ([0-9]+)(-([0-9]+))? site\\(s\\) each \\(attach "
                             "([0-9.]+) ms, detach ([0-9.]+) ms, ([0-9]+) probe hits while attaching and detaching, a "
                             "window\\); every 8th window holds every site, to find operators first called later: "
                             "([0-9]+) window\\(s\\) of ([0-9]+) site\\(s\\) \\(attach ([0-9.]+) ms, detach ([0-9.]+) ms, "
                             "([0-9]+) probe hits while attaching and detaching, a window\\); ([0-9]+) "
                             "operator\\(s\\) found")))
        << notes;
    const size_t hit_ops = std::stoul(m[1]), all_sites = std::stoul(m[2]), restricted = std::stoul(m[3]),
                 most_restricted = std::stoul(m[6].matched ? m[6].str() : m[4].str()), full = std::stoul(m[10]),
                 full_sites = std::stoul(m[11]);
    std::printf("hit set %zu operators of %zu sites: %zu restricted windows of at most %zu sites (attach %s ms, "
                "detach %s ms, %s hits while toggling), %zu full-set windows of %zu (attach %s ms, detach %s ms, %s "
                "hits while toggling); found later: %s\n",
                hit_ops, all_sites, restricted, most_restricted, m[7].str().c_str(), m[8].str().c_str(),
                m[9].str().c_str(), full, full_sites, m[12].str().c_str(), m[13].str().c_str(), m[14].str().c_str(),
                m[15].str().c_str());
    EXPECT_GE(restricted, 6u) << notes;
    EXPECT_GE(full, 2u) << notes;
    EXPECT_EQ(full_sites, all_sites) << notes;
    // The loop's four operators and relu (and what the profiler's own bookkeeping calls): far fewer than probed.
    EXPECT_LT(most_restricted * 3, all_sites) << notes;
    EXPECT_LE(most_restricted, hit_ops) << notes;
    EXPECT_LT(hit_ops * 3, all_sites) << notes;
    // The late operator: found by a full-set window, then counted in the windows after it.
    std::smatch late;
    ASSERT_TRUE(std::regex_search(notes, late, std::regex("aten::relu at ([0-9.]+) s"))) << notes;
    auto relu = sink.find("torch.op.calls", "aten::relu");
    ASSERT_NE(relu, nullptr) << notes;
    const auto calls = sink.samples_of(relu->id);
    ASSERT_FALSE(calls.empty());
    // Its count when the full-set window that found it closed: the last sample before the next counted window opened.
    auto watching = sink.samples_of(sink.find("trace.torch.watching")->id);
    int64_t next_open = INT64_MAX;
    for (auto& w : watching)
      if (w.value == 1 && w.t_ns > calls.front().t_ns) {
        next_open = w.t_ns;
        break;
      }
    double at_found = 0;
    for (auto& c : calls)
      if (c.t_ns < next_open) at_found = c.value;
    const double last = calls.back().value;
    std::printf("aten::relu: %.0f calls counted by the window that found it (%s s into the recording), %.0f in all "
                "(%d iterations called it)\n", at_found, late[1].str().c_str(), last,
                out["relu_iterations"].get<int>());
    EXPECT_GT(last, at_found) << "relu counted again after the full-set window that found it\n" << notes;
  };
  // The default list (which has no tanh: added, as the loop's counts are checked).
  std::vector<std::string> ops = default_torch_ops();
  ops.push_back("tanh");
  bool outside = false;
  check_budgeted_torch_counts({"late", "10", "3", "10"}, &notes, 1, &outside, ops, hit_set);
  if (outside) {  // as BudgetedTorchOpCountsScaleToTorchProfiler: a 95 % interval, one more independent recording
    std::printf("outside the stated error once: a second recording\n");
    check_budgeted_torch_counts({"late", "10", "3", "10"}, &notes, 1, nullptr, ops, hit_set);
  }
}
