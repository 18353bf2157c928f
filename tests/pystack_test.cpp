// Python stack sampling (--python-mode stack, bpf/pystack.bpf.c): offsets checked against the live interpreter,
// record decoding and window features without BPF, and as root a real python3.11 whose spinning and sleeping
// functions must be found with their file, line, callers and blocked time.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "analyze/features/window_layer_features.h"
#include "events.h"
#include "memory_sink.h"
#include "subject_process.h"
#include "test_util.h"
#include "trace/python_offsets.h"
#include "trace/record_decoder.h"
#include "trace/uprobe_tracer.h"

using namespace stackscope;
using namespace stackscope::trace;
using namespace std::chrono_literals;

namespace {

const std::string kPython = "/usr/bin/python3.11";
// Where a 3.12 is installed too (pyenv on the development VM), the sampling test runs on it as well.
std::vector<std::string> interpreters() {
  std::vector<std::string> out;
  if (std::filesystem::exists(kPython)) out.push_back(kPython);
  std::error_code ec;
  const std::string pyenv = std::string(getenv("HOME") ? getenv("HOME") : "/root") + "/.pyenv/versions";
  for (auto& d : std::filesystem::directory_iterator(pyenv, ec))
    if (d.path().filename().string().starts_with("3.12.") && std::filesystem::exists(d.path() / "bin/python3.12")) {
      out.push_back((d.path() / "bin/python3.12").string());
      break;
    }
  return out;
}
const std::string kTarget = std::string(STACKSCOPE_SOURCE_DIR) + "/tests/progs/pystack_target.py";

std::string arg_str(const Event& e, const char* key) {
  auto* v = e.arg(key);
  return v && std::holds_alternative<std::string>(*v) ? std::get<std::string>(*v) : "";
}

int line_of(const std::string& path, const std::string& text) {
  std::ifstream in(path);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(text) != std::string::npos) return n;
  return -1;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

#define REQUIRE_ROOT_AND_PYTHON()                                                           \
  do {                                                                                      \
    STACKSCOPE_REQUIRE(geteuid() == 0, "needs root to load eBPF programs");                 \
    STACKSCOPE_REQUIRE(std::filesystem::exists(kPython), "no " << kPython);                \
  } while (0)

TracerOptions stack_options() {
  TracerOptions o;
  o.python_mode = "stack";
  o.python_sample_hz = 499;  // enough samples in a test of a second
  return o;
}

}  // namespace

// The offsets stackscope carries for 3.11 are what the live interpreter has (eval/tracing/python_offsets.py
// searches its memory for known values); the same script is what the lead runs on the GPU machine's 3.12.
TEST(PyStack, OffsetsTableMatchesLiveInterpreter) {
  STACKSCOPE_REQUIRE(!interpreters().empty(), "no " << kPython);
  for (const std::string& py : interpreters()) {
    std::string out;
    int rc = run_command(py + " " + STACKSCOPE_SOURCE_DIR + "/eval/tracing/python_offsets.py " + STACKSCOPE_BIN, &out);
    EXPECT_EQ(rc, 0) << py << ":\n" << out;
    EXPECT_NE(out.find("all offsets match"), std::string::npos) << py << ":\n" << out;
  }
}

TEST(PyStack, RecordOptionsCheckedAndOffsetsPrinted) {
  std::string out;
  const std::string bin = STACKSCOPE_BIN;
  EXPECT_NE(run_command(bin + " record --layers host --python-sample-hz 0 -o /dev/null -- true", &out), 0);
  EXPECT_NE(out.find("--python-sample-hz must be between 1 and 10000"), std::string::npos) << out;
  EXPECT_NE(run_command(bin + " record --layers host --python-offcpu-min soon -o /dev/null -- true", &out), 0);
  EXPECT_NE(out.find("--python-offcpu-min: 'soon' is not a duration"), std::string::npos) << out;
  ASSERT_EQ(run_command(bin + " record --python-offsets", &out), 0) << out;
  EXPECT_NE(out.find("\"3.11\": {\"runtime_interpreters_head\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"3.12\""), std::string::npos) << out;
}

TEST(PyStack, VersionFromPyVersionSymbol) {
  STACKSCOPE_REQUIRE(std::filesystem::exists(kPython), "no " << kPython);
  auto img = ElfImage::open(kPython);
  auto v = python_version(*img);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->major, 3);
  EXPECT_EQ(v->minor, 11);
  EXPECT_TRUE(img->find_object("_PyRuntime"));
  EXPECT_NE(python_offsets(*v), nullptr);
  EXPECT_EQ(python_offsets({3, 10}), nullptr);
}

TEST(PyStack, DecodesSamplesIntoLeafNamedEvents) {
  RecordDecoder dec({}, [](uint32_t, uint64_t) { return std::string(); });
  auto code = [&](uint64_t addr, const char* name, int line) {
    ss_pycode_record c{};
    c.kind = SS_REC_PYCODE;
    c.pid = 7;
    c.code = addr;
    c.firstlineno = line;
    std::snprintf(c.qualname, sizeof c.qualname, "%s", name);
    std::snprintf(c.filename, sizeof c.filename, "/w/train.py");
    dec.note_pycode(c);
  };
  code(0x100, "<module>", 1);
  code(0x200, "Model.forward", 20);
  code(0x300, "hook", 40);
  ss_pystack_record r{};
  r.kind = SS_REC_PYSTACK;
  r.pid = 7;
  r.tid = 8;
  r.flags = SS_PYSTACK_OFFCPU;
  r.start_ns = 1000;
  r.duration_ns = 2'000'000;
  r.depth = 3;
  r.codes[0] = 0x300;
  r.codes[1] = 0x200;
  r.codes[2] = 0x100;
  Event e = dec.decode_pystack(r);
  EXPECT_EQ(e.layer, Layer::python);
  EXPECT_EQ(e.name, "hook (off-cpu)");
  EXPECT_EQ(e.duration_ns, 2'000'000);
  EXPECT_EQ(arg_str(e, "stack"), "<module>;Model.forward;hook");
  EXPECT_EQ(arg_str(e, "file"), "/w/train.py");
  EXPECT_EQ(e.arg_int("line"), 40);
  EXPECT_EQ(arg_str(e, "sample"), "off-cpu");
  r.flags = SS_PYSTACK_ONCPU | SS_PYSTACK_TRUNCATED;
  r.codes[0] = 0x999;  // never named: still an event
  Event s = dec.decode_pystack(r);
  EXPECT_EQ(s.name, "<code 0x999>");
  EXPECT_EQ(arg_str(s, "stack"), "...;<module>;Model.forward;<code 0x999>");
  EXPECT_EQ(arg_str(s, "sample"), "cpu");
}

// Sampled events add on-/off-CPU columns and stay out of busy_fraction.
TEST(PyStack, WindowFeaturesFromSamples) {
  auto grid = analyze::make_window_grid(0, 2'000'000'000, 1'000'000'000);
  analyze::CallWindowFeatures acc(Layer::python, grid);
  auto sample = [](int64_t t, int64_t d, const char* name, const char* kind) {
    Event e;
    e.layer = Layer::python;
    e.start_ns = t;
    e.duration_ns = d;
    e.name = name;
    e.args.push_back({"sample", std::string(kind)});
    return e;
  };
  for (int i = 0; i < 50; ++i) acc.add(sample(i * 10'000'000, 10'000'000, "busy", "cpu"));  // 0.5 s on CPU
  acc.add(sample(1'100'000'000, 300'000'000, "sleepy (off-cpu)", "off-cpu"));
  acc.add(sample(1'900'000'000, 200'000'000, "sleepy (off-cpu)", "off-cpu"));  // half in window 1
  auto t = acc.table();
  auto col = [&](const std::string& name) {
    for (size_t c = 0; c < t.columns.size(); ++c)
      if (t.columns[c] == name) return static_cast<Eigen::Index>(c);
    ADD_FAILURE() << "no column " << name;
    return Eigen::Index{0};
  };
  EXPECT_NEAR(t.values(0, col("python.oncpu_fraction")), 0.5, 1e-9);
  EXPECT_NEAR(t.values(1, col("python.oncpu_fraction")), 0.0, 1e-9);
  EXPECT_NEAR(t.values(1, col("python.offcpu_fraction")), 0.4, 1e-9);
  EXPECT_NEAR(t.values(1, col("python.log10_offcpu_count")), std::log10(3.0), 1e-9);
  EXPECT_NEAR(t.values(0, col("python.busy_fraction")), 0.0, 1e-9);
  EXPECT_NEAR(t.values(0, col("busy.log10_count")), std::log10(51.0), 1e-9);
}

// A spinning function gets the on-CPU samples with its file, first line and callers; a sleeping one the blocked
// time, close to what the program itself measured around its sleeps.
static void check_attribution(const std::string& python) {
  Subject py({python, kTarget, "6"});
  ASSERT_NE(py.expect("ready"), "");
  UprobeTracer tracer({Layer::python}, stack_options());
  stackscope::testing::MemorySink sink;
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(py.pid())};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(py.pid(), Layer::python, 10s));
  py.send("go");
  std::string done = py.expect("done");
  ASSERT_NE(done, "");
  const double slept_ns = std::stod(done.substr(5));
  EXPECT_EQ(py.wait(), 0);
  std::this_thread::sleep_for(300ms);  // the last records through the ring buffer
  tracer.stop();

  const int busy_line = line_of(kTarget, "def busy_loop"), sleepy_line = line_of(kTarget, "def sleepy");
  size_t busy = 0, busy_ok = 0, other_cpu = 0, offcpu_sleepy = 0;
  double blocked_ns = 0;
  for (const Event& e : sink.events()) {
    if (e.layer != Layer::python || static_cast<pid_t>(e.pid) != py.pid()) continue;
    const std::string stack = arg_str(e, "stack");
    if (arg_str(e, "sample") == "cpu") {
      if (e.name != "busy_loop") {
        ++other_cpu;
        continue;
      }
      ++busy;
      busy_ok += ends_with(arg_str(e, "file"), "pystack_target.py") && e.arg_int("line") == busy_line &&
                 ends_with(stack, "<module>;outer;middle;busy_loop");
    } else if (e.name == "sleepy (off-cpu)") {
      ++offcpu_sleepy;
      blocked_ns += static_cast<double>(e.duration_ns);
      EXPECT_EQ(e.arg_int("line"), sleepy_line);
      EXPECT_TRUE(ends_with(stack, "<module>;outer;middle;sleepy")) << stack;
    }
  }
  // 6 x 50 ms spinning at 499 Hz: ~150 samples; a loaded CI machine loses some CPU time to others.
  EXPECT_GE(busy, 40u) << "other on-CPU samples: " << other_cpu;
  EXPECT_EQ(busy_ok, busy);
  EXPECT_GT(busy, other_cpu);
  // 6 rounds x 5 sleeps of 20 ms (a sleep may block more than once). Under full-suite load one or two of the 30 went
  // unreported (3.12.1: 586 of 608 ms seen; another run: 28 of 30). A stack unreadable at switch-out is one cause, and
  // the recording counts those in its "could not be read" note: what was lost must be said. The blocked-time ratio
  // below is the property.
  size_t unread = 0;
  for (auto& n : sink.notes()) {
    const auto at = n.text.find(" stack(s) of Python threads could not be read");
    if (at != std::string::npos) unread += std::stoul(n.text.substr(n.text.rfind(' ', at - 1) + 1));
  }
  EXPECT_GE(offcpu_sleepy + std::min<size_t>(unread, 2), 29u) << unread << " stack(s) unread";
  EXPECT_LE(offcpu_sleepy, 36u);
  EXPECT_NEAR(blocked_ns / slept_ns, 1.0, 0.1) << blocked_ns << " blocked vs " << slept_ns << " slept";
  std::printf("%s: busy_loop samples %zu (others %zu), sleepy blocked %.1f ms of %.1f ms slept\n", python.c_str(),
              busy, other_cpu, blocked_ns / 1e6, slept_ns / 1e6);
}

// Both interpreters where present (3.12 walks past C-stack shim frames).
TEST(PyStack, OnCpuAndBlockedTimeAttributedToLeafFunctions) {
  REQUIRE_ROOT_AND_PYTHON();
  for (const std::string& python : interpreters()) {
    SCOPED_TRACE(python);
    check_attribution(python);
  }
}

// A Python process started later by a traced shell (fork + exec) is sampled; a busy process that is not Python
// gives no samples.
TEST(PyStack, FollowsLaterPythonAndIgnoresOthers) {
  REQUIRE_ROOT_AND_PYTHON();
  UprobeTracer tracer({Layer::python}, stack_options());
  stackscope::testing::MemorySink sink;
  Subject spinner({"/bin/sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo done"});
  Subject shell({"/bin/sh", "-c", "sleep 0.3; " + kPython + " " + kTarget + " 2; exit 0"});
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(spinner.pid()), static_cast<uint32_t>(shell.pid())};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_NE(shell.expect("ready"), "");
  std::this_thread::sleep_for(200ms);  // the exec record, then the rescan that registers the interpreter
  shell.send("go");
  ASSERT_NE(shell.expect("done"), "");
  EXPECT_EQ(shell.wait(), 0);
  ASSERT_NE(spinner.expect("done", 60s), "");
  EXPECT_EQ(spinner.wait(), 0);
  std::this_thread::sleep_for(300ms);
  tracer.stop();
  size_t child_busy = 0, from_spinner = 0;
  for (const Event& e : sink.events()) {
    if (e.layer != Layer::python) continue;
    if (static_cast<pid_t>(e.pid) == spinner.pid()) ++from_spinner;
    if (static_cast<pid_t>(e.pid) != shell.pid() && e.name == "busy_loop") ++child_busy;
  }
  EXPECT_GT(child_busy, 5u);
  EXPECT_EQ(from_spinner, 0u);
}

// 3.12 only: a function called back from C at every level puts a C-stack shim frame beside each Python frame, so
// the walk's frame budget runs out before SS_PYSTACK_DEPTH Python frames are kept: the stack must still be marked
// as missing its outermost frames.
TEST(PyStack, StackCutShortByShimFramesIsMarkedTruncated) {
  REQUIRE_ROOT_AND_PYTHON();
  const auto all = interpreters();
  auto py312 = std::find_if(all.begin(), all.end(), [](const std::string& p) { return ends_with(p, "3.12"); });
  // Not a CI prerequisite: Debian 12 (CI) has no python3.12; the GPU machines' python3 is 3.12 and runs it.
  if (py312 == all.end()) GTEST_SKIP() << "no python3.12 (none in Debian 12; runs where python3 is 3.12)";
  Subject py({*py312, "-c",
              "import sys, time\n"
              "def spin():\n"
              "    end = time.perf_counter() + 0.3\n"
              "    while time.perf_counter() < end: pass\n"
              "def down(n):\n"  // each level: down's frame and the shim under sorted's key call
              "    if n == 0: spin(); return 0\n"
              "    return sorted([n - 1], key=down)[0]\n"
              "print('ready', flush=True); sys.stdin.readline()\n"
              "down(28)\n"
              "print('done', flush=True)\n"});
  ASSERT_NE(py.expect("ready"), "");
  UprobeTracer tracer({Layer::python}, stack_options());
  stackscope::testing::MemorySink sink;
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(py.pid())};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(py.pid(), Layer::python, 10s));
  py.send("go");
  ASSERT_NE(py.expect("done"), "");
  EXPECT_EQ(py.wait(), 0);
  std::this_thread::sleep_for(300ms);
  tracer.stop();
  size_t spin = 0, marked = 0;
  for (const Event& e : sink.events()) {
    if (e.name != "spin" || static_cast<pid_t>(e.pid) != py.pid()) continue;
    ++spin;
    EXPECT_LT(e.arg_int("frames"), SS_PYSTACK_DEPTH);  // the frame budget, not the depth kept, cut it
    marked += arg_str(e, "stack").rfind("...;", 0) == 0;
  }
  EXPECT_GE(spin, 20u);
  EXPECT_EQ(marked, spin);
}
