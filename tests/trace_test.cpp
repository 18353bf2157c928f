// Tracer (src/trace): decoding, ELF symbol lookup and discovery without BPF; attach-and-observe tests against
// fake CUDA/NCCL libraries (tests/progs/trace_fake) and Debian's python3 + torch when running as root.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "events.h"
#include "memory_sink.h"
#include "model/sink.h"
#include "subject_process.h"
#include "test_util.h"
#include "trace/elf_symbols.h"
#include "trace/probe_catalog.h"
#include "trace/proc_maps.h"
#include "trace/record_decoder.h"
#include "trace/symbol_names.h"
#include "trace/uprobe_tracer.h"

using namespace stackscope;
using namespace stackscope::trace;
using namespace std::chrono_literals;

namespace {

const std::string kFakeDir = std::string(STACKSCOPE_BUILD_DIR) + "/tests/progs/fakegpu";
const std::string kFakeApp = std::string(STACKSCOPE_BUILD_DIR) + "/tests/progs/trace_fake_app";
const std::string kFakeDlopen = std::string(STACKSCOPE_BUILD_DIR) + "/tests/progs/trace_fake_dlopen";

class CollectingSink : public TelemetrySink {
 public:
  SeriesId add_series(const SeriesInfo&) override { return 0; }
  void append_event(Event&& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  void append_samples(std::span<const Sample>) override {}
  void add_drops(std::string_view, uint64_t n) override { drops_ += n; }
  void add_note(std::string_view, std::string_view text) override {
    std::lock_guard<std::mutex> lock(mu_);
    notes_.emplace_back(text);
  }
  std::vector<Event> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  std::vector<Event> named(const std::string& name, uint32_t pid = 0) {
    std::vector<Event> out;
    for (auto& e : events())
      if (e.name == name && (pid == 0 || e.pid == pid)) out.push_back(e);
    return out;
  }
  std::string notes() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string s;
    for (auto& n : notes_) s += n + "\n";
    return s;
  }
  uint64_t drops() const { return drops_; }

 private:
  std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::string> notes_;
  std::atomic<uint64_t> drops_{0};
};

#define REQUIRE_ROOT()                                                                             \
  do {                                                                                             \
    STACKSCOPE_REQUIRE(geteuid() == 0, "needs root to load eBPF programs and attach uprobes"); \
  } while (0)

int64_t arg_int(const Event& e, const char* key) { return e.arg_int(key, -999); }
std::string arg_str(const Event& e, const char* key) {
  auto* v = e.arg(key);
  return v && std::holds_alternative<std::string>(*v) ? std::get<std::string>(*v) : "";
}

const CallSpec* spec_named(const std::vector<CallSpec>& specs, const std::string& name, uint32_t* id) {
  for (uint32_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) {
      *id = i;
      return &specs[i];
    }
  return nullptr;
}

}  // namespace

// ---------------------------------------------------------------- without BPF

TEST(TraceDecoder, RuntimeLaunchGridBlockStreamAndKernelName) {
  auto specs = builtin_call_specs();
  uint32_t id = 0;
  ASSERT_TRUE(spec_named(specs, "cudaLaunchKernel", &id));
  RecordDecoder dec(specs, [](uint32_t pid, uint64_t addr) {
    return pid == 7 && addr == 0x401000 ? std::string("vector_add(float*, int)") : std::string();
  });
  ss_call_record r{};
  r.kind = SS_REC_CALL;
  r.call_id = id;
  r.pid = 7;
  r.tid = 8;
  r.start_ns = 100;
  r.duration_ns = 50;
  r.args[0] = 0x401000;
  r.args[1] = (2ull << 32) | 128;  // dim3 grid {128, 2, 3}: x,y in one register, z in the next
  r.args[2] = 3;
  r.args[3] = (4ull << 32) | 256;
  r.args[4] = 1;
  r.args[SS_ARG_STACK] = 64;          // sharedMem
  r.args[SS_ARG_STACK + 1] = 0x5000;  // stream
  auto e = dec.decode_call(r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->layer, Layer::cuda);
  EXPECT_TRUE(e->flags & kEventHostEnqueue);
  EXPECT_EQ(arg_str(*e, "kernel"), "vector_add(float*, int)");
  EXPECT_EQ(arg_int(*e, "grid_x"), 128);
  EXPECT_EQ(arg_int(*e, "grid_y"), 2);
  EXPECT_EQ(arg_int(*e, "grid_z"), 3);
  EXPECT_EQ(arg_int(*e, "block_x"), 256);
  EXPECT_EQ(arg_int(*e, "block_y"), 4);
  EXPECT_EQ(arg_int(*e, "block_z"), 1);
  EXPECT_EQ(arg_int(*e, "shared_mem"), 64);
  EXPECT_EQ(arg_int(*e, "stream"), 0x5000);
}

TEST(TraceDecoder, NcclBytesFromDatatypeAndRankFromInit) {
  auto specs = builtin_call_specs();
  RecordDecoder dec(specs, {});
  uint32_t init_id = 0, ar_id = 0;
  ASSERT_TRUE(spec_named(specs, "ncclCommInitRank", &init_id));
  ASSERT_TRUE(spec_named(specs, "ncclAllReduce", &ar_id));
  ss_call_record init{};
  init.call_id = init_id;
  init.pid = 9;
  init.args[1] = 8;                       // nranks
  init.args[2] = 5;                       // rank (rdx: the 128-byte unique id went to the stack)
  init.args[SS_ARG_DEREF] = 0xc0ffee;     // *comm at return
  ASSERT_TRUE(dec.decode_call(init));
  ss_call_record ar{};
  ar.call_id = ar_id;
  ar.pid = 9;
  ar.args[2] = 1000;  // count
  ar.args[3] = 9;     // ncclBfloat16
  ar.args[4] = 4;     // ncclAvg
  ar.args[5] = 0xc0ffee;
  ar.args[SS_ARG_STACK] = 0x77;  // stream: 7th argument
  auto e = dec.decode_call(ar);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->layer, Layer::nccl);
  EXPECT_EQ(arg_int(*e, "bytes"), 2000);
  EXPECT_EQ(arg_str(*e, "datatype"), "bfloat16");
  EXPECT_EQ(arg_str(*e, "op"), "avg");
  EXPECT_EQ(arg_int(*e, "rank"), 5);
  EXPECT_EQ(arg_int(*e, "nranks"), 8);
  EXPECT_EQ(arg_int(*e, "stream"), 0x77);
  ar.pid = 10;  // same comm value in another process: rank unknown there
  EXPECT_EQ(arg_int(*dec.decode_call(ar), "rank"), -999);
}

TEST(TraceDecoder, TorchOperatorSymbols) {
  EXPECT_EQ(torch_ops_struct("_ZN2at4_ops5addmm4callERKNS_6TensorES4_S4_RKN3c106ScalarES8_"), "addmm");
  EXPECT_EQ(torch_ops_struct("_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE"), "add_Tensor");
  EXPECT_FALSE(torch_ops_struct("_ZN2at4_ops5addmm10redispatchEN3c1014DispatchKeySetERKNS_6TensorES6_S6_"));
  EXPECT_FALSE(torch_ops_struct("cudaMalloc"));
  EXPECT_EQ(torch_event_name("addmm"), "aten::addmm");
  EXPECT_EQ(torch_event_name("add_Tensor"), "aten::add.Tensor");
  EXPECT_EQ(torch_event_name("native_layer_norm_backward"), "aten::native_layer_norm_backward");
  EXPECT_TRUE(matches_any("threshold_backward", default_torch_ops()));
  EXPECT_FALSE(matches_any("view", default_torch_ops()));
  EXPECT_EQ(demangle("_Z15vector_add_stubPfS_i"), "vector_add_stub(float*, float*, int)");
}

// torch.profiler names an operator without its overload (aten::sum for sum.dim_IntList, aten::softmax for
// softmax.int), and a struct name cannot say where the overload begins: the names come from the schema strings.
TEST(TraceDecoder, TorchOperatorNamesFromSchemaStrings) {
  using namespace std::string_view_literals;
  // As in libtorch_cpu's .rodata; addmm's schema shares its tail with sparse_sampled_addmm's (merged by the linker).
  const auto rodata = "x(y)\0sum.dim_IntList(Tensor self, int[1]? dim) -> Tensor\0mse_loss_backward.grad_input(Tensor "
                      "grad_output, *, Tensor(a!) grad_input) -> Tensor(a!)\0mse_loss_backward(Tensor grad_output) -> "
                      "Tensor\0softmax.int(Tensor self, int dim) -> Tensor\0sparse_sampled_addmm(Tensor self) -> "
                      "Tensor\0aten::add.Tensor(Tensor self)\0"sv;
  const std::set<std::string> structs{"sum_dim_IntList", "mse_loss_backward_grad_input", "mse_loss_backward",
                                      "softmax_int", "addmm", "add_Tensor", "_cast_Byte"};
  const auto names = torch_op_names(rodata, structs);
  auto named = [&](const std::string& s) {
    auto it = names.find(s);
    return it == names.end() ? std::string("-") : it->second.name + "|" + it->second.overload;
  };
  EXPECT_EQ(named("sum_dim_IntList"), "sum|dim_IntList");
  EXPECT_EQ(named("mse_loss_backward_grad_input"), "mse_loss_backward|grad_input");
  EXPECT_EQ(named("mse_loss_backward"), "mse_loss_backward|");
  EXPECT_EQ(named("softmax_int"), "softmax|int");
  EXPECT_EQ(named("addmm"), "addmm|");
  EXPECT_EQ(named("add_Tensor"), "add|Tensor");
  EXPECT_EQ(named("_cast_Byte"), "-");  // no schema: the struct name's guess (torch_event_name) names it
  // A pattern names a struct or an operator (every overload of it, as the profiler counts them).
  const TorchOpName grad_input{"mse_loss_backward", "grad_input"}, add_out{"add", "out"};
  EXPECT_TRUE(matches_any("mse_loss_backward_grad_input", &grad_input, default_torch_ops()));
  EXPECT_FALSE(matches_any("mse_loss_backward_grad_input", nullptr, default_torch_ops()));
  EXPECT_FALSE(matches_any("add_out", &add_out, {"add_Tensor"}));
  EXPECT_TRUE(matches_any("add_out", &add_out, {"add"}));
}

// The same on Debian's libtorch_cpu (torch 1.13): nearly every operator struct is named from its schema.
TEST(TraceDecoder, TorchOperatorNamesOfARealLibtorch) {
  const std::string path = "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13";
  STACKSCOPE_REQUIRE(std::filesystem::exists(path), "no Debian python3-torch (libtorch_cpu.so.1.13)");
  auto img = ElfImage::open(path);
  std::set<std::string> structs;
  img->for_each_function([&](std::string_view name, uint64_t) {
    if (auto op = torch_ops_struct(name)) structs.insert(*op);
  });
  ASSERT_GT(structs.size(), 1000u);
  std::unordered_map<std::string, TorchOpName> names;
  img->with_section(".rodata", [&](std::string_view rodata) { names = torch_op_names(rodata, structs); });
  EXPECT_GT(names.size(), structs.size() * 95 / 100) << names.size() << " of " << structs.size();
  ASSERT_TRUE(names.count("sum_dim_IntList"));
  EXPECT_EQ(names.at("sum_dim_IntList").name, "sum");
  EXPECT_EQ(names.at("mse_loss_backward_grad_input").name, "mse_loss_backward");
  EXPECT_EQ(names.at("mse_loss_backward_grad_input").overload, "grad_input");
  EXPECT_EQ(names.at("softmax_int").name, "softmax");
  EXPECT_EQ(names.at("add__Tensor").name, "add_");
  EXPECT_EQ(names.at("addmm").name, "addmm");
  EXPECT_EQ(names.at("addmm").overload, "");
}

TEST(TraceDiscovery, ClassifiesLibrariesFromMaps) {
  auto maps = parse_proc_maps(
      "7f0000000000-7f0000100000 r-xp 00001000 fd:01 11 /opt/venv/nvidia/cu13/lib/libcudart.so.13\n"
      "7f0000200000-7f0000300000 r-xp 00002000 fd:01 12 /usr/local/nvidia/lib64/libcuda.so.1\n"
      "7f0000400000-7f0000500000 r--p 00000000 fd:01 13 /opt/nccl/lib/libnccl.so.2\n"
      "7f0000600000-7f0000700000 r-xp 00000000 fd:01 14 /usr/bin/python3.12\n"
      "7f0000800000-7f0000900000 r-xp 00000000 fd:01 15 /usr/lib/libcudnn.so.9 (deleted)\n"
      "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n");
  ASSERT_EQ(maps.size(), 6u);
  EXPECT_EQ(maps[4].path, "/usr/lib/libcudnn.so.9");
  auto libs = find_libraries(42, maps);
  ASSERT_EQ(libs.size(), 3u);  // libnccl is not mapped executable yet
  EXPECT_EQ(libs[0].kind, LibraryKind::cudart);
  EXPECT_EQ(libs[0].host_path, "/proc/42/root/opt/venv/nvidia/cu13/lib/libcudart.so.13");
  EXPECT_EQ(libs[1].kind, LibraryKind::cuda_driver);
  EXPECT_EQ(libs[2].kind, LibraryKind::python);
  EXPECT_FALSE(classify_library("/usr/lib/libcudnn.so.9"));
  EXPECT_EQ(classify_library("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13"), LibraryKind::torch_cpu);
}

TEST(TraceElf, VersionedNamesAndWeakAliases) {
  auto cudart = ElfImage::open(kFakeDir + "/libcudart.so.13");
  const ElfSymbol* launch = cudart->find("cudaLaunchKernel");  // exported as cudaLaunchKernel@@libcudart.so.13
  ASSERT_TRUE(launch);
  EXPECT_TRUE(cudart->vaddr_to_offset(launch->vaddr));
  auto nccl = ElfImage::open(kFakeDir + "/libnccl.so.2");
  const ElfSymbol* weak = nccl->find("ncclAllReduce");
  const ElfSymbol* strong = nccl->find("pncclAllReduce");
  ASSERT_TRUE(weak && strong);
  EXPECT_EQ(weak->vaddr, strong->vaddr);  // one address: probed once
  EXPECT_EQ(nccl->name_of(*nccl->symbol_at(weak->vaddr)), "pncclAllReduce");
  EXPECT_THROW(ElfImage::open(kFakeDir + "/no-such-lib.so"), std::runtime_error);
}

TEST(TraceElf, DebianPythonHasFunctionUsdt) {
  STACKSCOPE_REQUIRE(std::filesystem::exists("/usr/bin/python3.11"), "no /usr/bin/python3.11");
  auto py = ElfImage::open("/usr/bin/python3.11");
  EXPECT_TRUE(py->has_usdt("python", "function__entry"));
  EXPECT_TRUE(py->find("_PyEval_EvalFrameDefault"));
}

// ---------------------------------------------------------------- with BPF (root)

TEST(TraceUprobe, FakeGpuCallsDecodedAndLaunchCountedOnce) {
  REQUIRE_ROOT();
  Subject app({kFakeApp, "calls"});
  ASSERT_NE(app.expect("ready"), "");
  CollectingSink sink;
  UprobeTracer tracer({Layer::cuda, Layer::nccl}, {});
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(app.pid())};
  auto st = tracer.start(sink, opts);
  ASSERT_TRUE(st.running) << st.message;
  ASSERT_TRUE(tracer.wait_until_attached(app.pid(), Layer::cuda, 20s)) << sink.notes();
  ASSERT_TRUE(tracer.wait_until_attached(app.pid(), Layer::nccl, 20s)) << sink.notes();
  app.send("go");
  ASSERT_NE(app.expect("done"), "");
  EXPECT_EQ(app.wait(), 0);
  ASSERT_TRUE(eventually([&] { return !sink.named("ncclGroupEnd").empty(); })) << sink.notes();
  tracer.stop();
  uint32_t pid = app.pid();

  auto launches = sink.named("cudaLaunchKernel", pid);
  ASSERT_EQ(launches.size(), 3u);
  for (auto& e : launches) {
    EXPECT_NE(arg_str(e, "kernel").find("vector_add_stub"), std::string::npos) << arg_str(e, "kernel");
    EXPECT_EQ(arg_int(e, "grid_x"), 128);
    EXPECT_EQ(arg_int(e, "grid_y"), 2);
    EXPECT_EQ(arg_int(e, "grid_z"), 1);
    EXPECT_EQ(arg_int(e, "block_x"), 256);
    EXPECT_EQ(arg_int(e, "block_y"), 1);
    EXPECT_EQ(arg_int(e, "shared_mem"), 64);
    EXPECT_EQ(arg_int(e, "stream"), 0x5000);
    EXPECT_TRUE(e.flags & kEventHostEnqueue);
  }
  // The runtime launches call cuLaunchKernel beneath them: only the two direct driver launches are reported.
  auto drv = sink.named("cuLaunchKernel", pid);
  ASSERT_EQ(drv.size(), 2u);
  for (auto& e : drv) {
    EXPECT_EQ(arg_str(e, "kernel"), "triton_fused_kernel");
    EXPECT_EQ(arg_int(e, "grid_x"), 7);
    EXPECT_EQ(arg_int(e, "grid_z"), 9);
    EXPECT_EQ(arg_int(e, "block_x"), 32);
    EXPECT_EQ(arg_int(e, "block_z"), 2);  // 7th argument: on the stack
    EXPECT_EQ(arg_int(e, "shared_mem"), 128);
    EXPECT_EQ(arg_int(e, "stream"), 0x5000);
  }
  auto mallocs = sink.named("cudaMalloc", pid);
  ASSERT_EQ(mallocs.size(), 1u);
  EXPECT_EQ(arg_int(mallocs[0], "bytes"), 1 << 20);
  EXPECT_EQ(arg_int(mallocs[0], "ptr"), static_cast<int64_t>(0x7f0000000000ULL + (1 << 20)) + 0) << "pointer read at return";
  EXPECT_TRUE(sink.named("cuMemAlloc", pid).empty());
  auto copies = sink.named("cudaMemcpy", pid);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(arg_int(copies[0], "bytes"), 4096);
  EXPECT_EQ(arg_str(copies[0], "direction"), "HtoD");
  auto async = sink.named("cudaMemcpyAsync", pid);
  ASSERT_EQ(async.size(), 1u);
  EXPECT_EQ(arg_str(async[0], "direction"), "DtoH");
  EXPECT_EQ(arg_int(async[0], "bytes"), 2048);
  auto syncs = sink.named("cudaStreamSynchronize", pid);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_GE(syncs[0].duration_ns, 1'500'000);  // the fake waits 2 ms
  EXPECT_FALSE(syncs[0].flags & kEventHostEnqueue);
  EXPECT_TRUE(sink.named("cuStreamSynchronize", pid).empty());

  auto inits = sink.named("ncclCommInitRank", pid);
  ASSERT_EQ(inits.size(), 1u);
  EXPECT_EQ(arg_int(inits[0], "rank"), 2);
  EXPECT_EQ(arg_int(inits[0], "nranks"), 4);
  auto ar = sink.named("ncclAllReduce", pid);
  ASSERT_EQ(ar.size(), 1u);  // weak alias and pncclAllReduce share an address: probed once
  EXPECT_EQ(arg_int(ar[0], "count"), 1000);
  EXPECT_EQ(arg_str(ar[0], "datatype"), "float16");
  EXPECT_EQ(arg_int(ar[0], "bytes"), 2000);
  EXPECT_EQ(arg_str(ar[0], "op"), "sum");
  EXPECT_EQ(arg_int(ar[0], "rank"), 2);
  EXPECT_EQ(arg_int(ar[0], "comm"), arg_int(inits[0], "comm"));
  EXPECT_EQ(arg_int(ar[0], "stream"), 0x5000);
  auto ag = sink.named("ncclAllGather", pid);
  ASSERT_EQ(ag.size(), 1u);
  EXPECT_EQ(arg_int(ag[0], "bytes"), 80);
  auto red = sink.named("ncclReduce", pid);
  ASSERT_EQ(red.size(), 1u);
  EXPECT_EQ(arg_int(red[0], "bytes"), 40);
  EXPECT_EQ(arg_str(red[0], "op"), "max");
  EXPECT_EQ(arg_int(red[0], "root"), 1);
  EXPECT_EQ(arg_int(red[0], "rank"), 2);  // comm and stream are the 7th and 8th arguments
  EXPECT_EQ(arg_int(red[0], "stream"), 0x5000);
  auto send = sink.named("ncclSend", pid);
  ASSERT_EQ(send.size(), 1u);
  EXPECT_EQ(arg_int(send[0], "bytes"), 12);
  EXPECT_EQ(arg_int(send[0], "peer"), 1);
  EXPECT_EQ(sink.named("ncclGroupStart", pid).size(), 1u);
  EXPECT_EQ(sink.drops(), 0u);
}

TEST(TraceUprobe, FindsLibraryDlopenedLate) {
  REQUIRE_ROOT();
  Subject app({kFakeDlopen, kFakeDir});
  ASSERT_NE(app.expect("ready"), "");
  CollectingSink sink;
  UprobeTracer tracer({Layer::nccl}, {});
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(app.pid())};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(tracer.wait_until_attached(app.pid(), Layer::nccl, 0ms)) << "libnccl is not mapped yet";
  app.send("go");
  ASSERT_NE(app.expect("loaded"), "");
  ASSERT_TRUE(tracer.wait_until_attached(app.pid(), Layer::nccl, 20s)) << sink.notes();
  app.send("go");
  ASSERT_NE(app.expect("done"), "");
  ASSERT_TRUE(eventually([&] { return !sink.named("ncclAllReduce").empty(); }));
  auto ar = sink.named("ncclAllReduce", app.pid());
  ASSERT_EQ(ar.size(), 1u);
  EXPECT_EQ(arg_int(ar[0], "bytes"), 256);
  EXPECT_EQ(arg_str(ar[0], "op"), "avg");
}

TEST(TraceUprobe, FollowsForkExecAndExit) {
  REQUIRE_ROOT();
  TempDir dir;
  Subject launcher({kFakeApp, "spawn", "2", dir.path()});
  ASSERT_NE(launcher.expect("ready"), "");
  CollectingSink sink;
  UprobeTracer tracer({Layer::cuda}, {});
  ASSERT_TRUE(tracer.start(sink, {}).running);
  tracer.add_pid(launcher.pid());  // after start, as the recorder does for its child
  ASSERT_TRUE(tracer.wait_until_attached(launcher.pid(), Layer::cuda, 20s));
  launcher.send("go");
  std::set<uint32_t> released;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (released.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    for (auto pid : tracer.traced_pids()) {
      if (pid == static_cast<uint32_t>(launcher.pid()) || released.count(pid)) continue;
      if (!tracer.wait_until_attached(pid, Layer::cuda, 100ms)) continue;
      write_file(dir.file("go." + std::to_string(pid)), "");
      released.insert(pid);
    }
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(released.size(), 2u) << "both children followed: " << sink.notes();
  ASSERT_NE(launcher.expect("done"), "");
  EXPECT_EQ(launcher.wait(), 0);
  for (auto pid : released) {
    EXPECT_TRUE(eventually([&] { return sink.named("cudaLaunchKernel", pid).size() == 3; }))
        << "child " << pid << ": " << sink.named("cudaLaunchKernel", pid).size();
    auto k = sink.named("cudaLaunchKernel", pid);
    if (!k.empty()) {
      EXPECT_NE(arg_str(k[0], "kernel").find("vector_add_stub"), std::string::npos);
    }
  }
  EXPECT_TRUE(eventually([&] { return tracer.traced_pids().empty(); })) << "exited processes are dropped";
}

// Calls whose return never comes (a signal handler leaves them with siglongjmp; the kernel drops their return
// probes) must not shift the pairing of the thread's later calls: every launch after them is still recorded.
TEST(TraceUprobe, CallsLeftByLongjmpDoNotHideLaterCalls) {
  REQUIRE_ROOT();
  Subject app({kFakeApp, "longjmp", "6"});
  ASSERT_NE(app.expect("ready"), "");
  CollectingSink sink;
  UprobeTracer tracer({Layer::cuda}, {});
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(app.pid())};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(app.pid(), Layer::cuda, 20s)) << sink.notes();
  app.send("go");
  ASSERT_EQ(app.expect("done"), "done 6") << "every synchronisation was left by the signal handler";
  EXPECT_EQ(app.wait(), 0);
  tracer.stop();  // drains the ring buffer and writes the counters' notes
  uint32_t pid = app.pid();
  EXPECT_EQ(sink.named("cudaLaunchKernel", pid).size(), 3u) << sink.notes();
  EXPECT_TRUE(sink.named("cudaStreamSynchronize", pid).empty());
  EXPECT_NE(sink.notes().find("whose return never came"), std::string::npos) << sink.notes();
}

// The kernel gives a call no return probe when its thread already has 64 pending (all probes together); the
// python C-API probes reach that under deep Python recursion. Such calls are counted, not kept: a kept entry
// that no return closes used to shift every later pairing on the thread, so its shallow calls were lost too.
TEST(TraceUprobe, CallsBeyondKernelReturnProbeLimitDoNotHideLaterCalls) {
  REQUIRE_ROOT();
  STACKSCOPE_REQUIRE(std::filesystem::exists("/usr/bin/python3.11"), "no /usr/bin/python3.11");
  Subject py({"/usr/bin/python3.11", "-c",
              "import ctypes, sys\n"
              "lib = ctypes.CDLL('" + kFakeDir + "/libcudart.so.13')\n"
              "ptr = ctypes.c_void_p()\n"
              "def malloc(n): lib.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(n))\n"
              "class Down:\n"  // an instance call: a C-API call and an eval loop per level
              "    def __call__(self, n): return self(n - 1) if n else malloc(4096)\n"
              "print('ready', flush=True); sys.stdin.readline()\n"
              "for i in range(20): Down()(80)\n"
              "for i in range(20): malloc(8192)\n"
              "print('done', flush=True)\n"});
  ASSERT_NE(py.expect("ready"), "");
  TracerOptions topts;
  topts.python_mode = "capi";  // duty cycle off: attached throughout
  CollectingSink sink;
  UprobeTracer tracer({Layer::cuda, Layer::python}, topts);
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(py.pid())};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(py.pid(), Layer::cuda, 20s)) << sink.notes();
  ASSERT_TRUE(tracer.wait_until_attached(py.pid(), Layer::python, 20s)) << sink.notes();
  py.send("go");
  ASSERT_NE(py.expect("done"), "");
  EXPECT_EQ(py.wait(), 0);
  tracer.stop();
  size_t deep = 0, shallow = 0;
  for (auto& e : sink.named("cudaMalloc", py.pid())) {
    deep += arg_int(e, "bytes") == 4096;
    shallow += arg_int(e, "bytes") == 8192;
  }
  EXPECT_EQ(shallow, 20u) << sink.notes();
  EXPECT_EQ(deep, 0u) << "80 levels down the kernel probes no return";
  EXPECT_NE(sink.notes().find("cuda: 40 call(s) not reported: the kernel gave them no return probe"),
            std::string::npos)
      << "20 cudaMalloc and the cuMemAlloc beneath each: " << sink.notes();
}

TEST(TraceUprobe, PythonFunctionsAndTorchOperators) {
  REQUIRE_ROOT();
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import torch'") == 0, "no python3-torch");
  Subject py({"/usr/bin/python3", std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data/trace_train.py", "3"});
  ASSERT_NE(py.expect("ready", 120s), "");
  TracerOptions topts;
  topts.python_mode = "usdt";  // "auto" samples stacks on 3.11 (tests/pystack_test.cpp)
  topts.full_detail = true;     // one event per operator (budgeted detail counts them in the kernel)
  CollectingSink sink;
  UprobeTracer tracer({Layer::torch, Layer::python}, topts);
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(py.pid())};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(py.pid(), Layer::python, 60s)) << sink.notes();
  ASSERT_TRUE(tracer.wait_until_attached(py.pid(), Layer::torch, 60s)) << sink.notes();
  py.send("go");
  ASSERT_NE(py.expect("done", 120s), "");
  EXPECT_EQ(py.wait(), 0);
  ASSERT_TRUE(eventually([&] { return !sink.named("train_step").empty(); }));
  tracer.stop();

  auto steps = sink.named("train_step", py.pid());
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_NE(arg_str(steps[0], "file").find("trace_train.py"), std::string::npos);
  // CPython 3.11 fires function__return only (see bpf/events.h): the line is where train_step returns.
  int return_line = 0, def_line = 0, n = 0;
  for (std::istringstream in(read_file(std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data/trace_train.py"));
       !in.eof();) {
    std::string line;
    std::getline(in, line);
    ++n;
    if (line.find("return loss.item()") != std::string::npos) return_line = n;
    if (line.find("def train_step") != std::string::npos) def_line = n;
  }
  int64_t line = arg_int(steps[0], "line");
  EXPECT_TRUE(line == return_line || line == def_line) << line;  // return, or `def` when entries fire
  EXPECT_GE(sink.named("forward", py.pid()).size(), 3u);  // TinyNet.forward, plus nn.Linear.forward
  std::set<std::string> ops;
  for (auto& e : sink.events())
    if (e.layer == Layer::torch) ops.insert(e.name);
  std::string all;
  for (auto& o : ops) all += o + " ";
  EXPECT_TRUE(ops.count("aten::addmm") || ops.count("aten::mm")) << all;
  EXPECT_TRUE(ops.count("aten::relu")) << all;
  EXPECT_TRUE(ops.count("aten::linear")) << all;
  bool backward = false;
  for (auto& o : ops) backward = backward || o.ends_with("_backward");
  EXPECT_TRUE(backward) << all;
  // Nesting: addmm runs inside linear on the same thread.
  bool nested = false;
  for (auto& e : sink.events())
    if (e.name == "aten::addmm" && e.arg_int("depth") > 0) nested = true;
  EXPECT_TRUE(nested);
}

// Duty-cycled C-API probes (python 3.12 has no function USDT, so this is what the GPU machine uses): calls are
// recorded only inside the windows that python.capi.watching marks, and in more than one window.
TEST(TraceUprobe, PythonCapiDutyCycleRecordsOnlyWatchedWindows) {
  REQUIRE_ROOT();
  STACKSCOPE_REQUIRE(std::filesystem::exists("/usr/bin/python3.11"), "no /usr/bin/python3.11");
  Subject py({"/usr/bin/python3.11", "-c",
              "import sys, time\n"
              "def f(x): return x + 1\n"
              "print('ready', flush=True); sys.stdin.readline()\n"
              "end = time.monotonic() + 4\n"
              "while time.monotonic() < end:\n"
              "    for i in range(1000): f(*(i,))\n"  // CALL_FUNCTION_EX goes through PyObject_Call
              "print('done', flush=True)\n"});
  ASSERT_NE(py.expect("ready"), "");
  TracerOptions topts;
  topts.python_mode = "capi";
  topts.python_duty_on_ms = 200;
  topts.python_duty_period_ms = 700;
  stackscope::testing::MemorySink sink;
  UprobeTracer tracer({Layer::python}, topts);
  CollectorOptions opts;
  opts.pids = {static_cast<uint32_t>(py.pid())};
  ASSERT_TRUE(tracer.start(sink, opts).running);
  ASSERT_TRUE(tracer.wait_until_attached(py.pid(), Layer::python, 20s));
  py.send("go");
  ASSERT_NE(py.expect("done"), "");
  tracer.stop();
  const SeriesInfo* w = sink.find("python.capi.watching");
  ASSERT_TRUE(w);
  std::vector<std::pair<int64_t, int64_t>> windows;  // [watching 1, watching 0]
  for (auto& s : sink.samples_of(w->id)) {
    if (s.value == 1) windows.push_back({s.t_ns, INT64_MAX});
    else if (!windows.empty()) windows.back().second = s.t_ns;
  }
  // 4 s of work at 200 ms / 700 ms; on a loaded VM one detach can take ~0.5 s and push the next window out.
  ASSERT_GE(windows.size(), 3u);
  std::vector<int> per_window(windows.size());
  size_t python_events = 0, outside = 0;
  for (auto& e : sink.events()) {
    if (e.layer != Layer::python) continue;
    ++python_events;
    bool in = false;
    for (size_t i = 0; i < windows.size(); ++i)
      if (e.start_ns >= windows[i].first && e.start_ns <= windows[i].second) {
        in = true;
        ++per_window[i];
      }
    outside += !in;
  }
  EXPECT_GT(python_events, 0u);
  EXPECT_EQ(outside, 0u) << "every recorded call started inside a watched window";
  int active = 0;
  for (int n : per_window) active += n > 0;
  EXPECT_GE(active, 2) << "calls recorded in several windows";
  int64_t watched = 0;
  for (auto& [a, b] : windows) watched += (b == INT64_MAX ? windows.back().first : b) - a;
  std::printf("%zu windows, %.0f ms watched, %zu python calls recorded\n", windows.size(), watched / 1e6, python_events);
}
