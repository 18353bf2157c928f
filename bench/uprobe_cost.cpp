// Per-hit cost of a uprobe on this machine: a tiny function called N times (default 1 M), timed bare, under a
// minimal uprobe (functions that begin with push, endbr64 or lea), a minimal uretprobe, both, and under
// stackscope's own programs loaded from its built bpf objects (the CUDA/NCCL call pair, the PyTorch operator pair),
// attached as the tracer attaches them (libbpf uprobe links with a bpf_cookie), their ring buffer drained by a
// thread woken per record (as `record` polls) or every 10 ms. Prints wall and thread-CPU ns per call and what the
// probe adds; --json writes the same. --first-insn says which instruction a real target's uprobe traps on.
//
//   sudo build/bench/uprobe_cost [--calls 1000000] [--bpf-dir build/gen] [--json out.json]
//   sudo build/bench/uprobe_cost --probe cuda.bpf.o:call_entry,call_return --probe torch.bpf.o:op_entry,op_return
//   sudo build/bench/uprobe_cost --first-insn-only --first-insn /usr/bin/python3.11:PyObject_Call
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/limits.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "trace/elf_symbols.h"
#include "uprobe_cost.skel.h"

// The probed functions. What a uprobe costs depends on the probed instruction: the kernel emulates a few (push,
// nop, jmp, call) at the breakpoint, and runs any other out of line, single-stepped, which is a second trap. Real
// probe targets (CUDA runtime and driver entry points, at::_ops::*::call, CPython's C API) mostly begin with a
// push or with endbr64; one that begins with a plain instruction (lea) shows the single-step case.
using Target = uint64_t (*)(uint64_t);
#if defined(__x86_64__)
extern "C" uint64_t ss_target_push(uint64_t);
extern "C" uint64_t ss_target_endbr(uint64_t);
extern "C" uint64_t ss_target_lea(uint64_t);
asm(R"(
  .text
  .globl ss_target_push
  .type ss_target_push, @function
ss_target_push:
  push %rbp
  lea 1(%rdi), %rax
  pop %rbp
  ret
  .size ss_target_push, .-ss_target_push
  .globl ss_target_endbr
  .type ss_target_endbr, @function
ss_target_endbr:
  endbr64
  push %rbp
  lea 1(%rdi), %rax
  pop %rbp
  ret
  .size ss_target_endbr, .-ss_target_endbr
  .globl ss_target_lea
  .type ss_target_lea, @function
ss_target_lea:
  lea 1(%rdi), %rax
  ret
  .size ss_target_lea, .-ss_target_lea
)");
const std::vector<std::pair<const char*, Target>> kTargets = {
    {"ss_target_push", ss_target_push}, {"ss_target_endbr", ss_target_endbr}, {"ss_target_lea", ss_target_lea}};
#else
extern "C" __attribute__((noinline, used)) uint64_t ss_target_plain(uint64_t x) {
  asm volatile("" : "+r"(x));  // neither inlined nor folded away
  return x + 1;
}
const std::vector<std::pair<const char*, Target>> kTargets = {{"ss_target_plain", ss_target_plain}};
#endif

namespace {


double thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// Wall and this thread's CPU time (user + the traps' kernel time; not the time it waited for a core, which
// dominates wall time on a loaded machine) per call.
struct PerCall {
  double wall_ns = 0, cpu_ns = 0;
};

PerCall ns_per_call(Target fn, uint64_t calls) {
  volatile uint64_t sink = 0;
  double c0 = thread_cpu_ns();
  auto t0 = std::chrono::steady_clock::now();
  uint64_t x = 0;
  for (uint64_t i = 0; i < calls; ++i) x = fn(x);
  auto t1 = std::chrono::steady_clock::now();
  double c1 = thread_cpu_ns();
  sink = x;
  (void)sink;
  double n = static_cast<double>(calls);
  return {std::chrono::duration<double, std::nano>(t1 - t0).count() / n, (c1 - c0) / n};
}

std::string self_path() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  buf[n] = 0;
  return buf;
}

bpf_link* attach(bpf_program* prog, const char* target, bool retprobe, uint64_t cookie, std::string& err) {
  // Filled by hand: LIBBPF_OPTS leaves members uninitialised by name, which g++ warns of with libbpf 1.7's headers.
  bpf_uprobe_opts opts{};
  opts.sz = sizeof(opts);
  opts.bpf_cookie = cookie;
  opts.retprobe = retprobe;
  opts.func_name = target;
  bpf_link* l = bpf_program__attach_uprobe_opts(prog, static_cast<pid_t>(::getpid()), self_path().c_str(), 0, &opts);
  if (!l) err = std::string("attach ") + bpf_program__name(prog) + ": " + std::to_string(-errno);
  return l;
}

struct Row {
  explicit Row(std::string n, PerCall per_call = {}) : name(std::move(n)), ns(per_call) {}
  std::string name;
  PerCall ns;
  uint64_t hits = 0;  // what the probe programs saw (checks every call was probed)
  std::string error;
};

// One --probe: OBJECT:ENTRY[,RETURN][@cookie=N][@GLOBAL=VALUE]... (a global: a const volatile or .data/.bss
// variable of the object, set before load, e.g. torch.bpf.o's `aggregate`).
struct ProbeSpec {
  std::string text, object, entry, ret;
  uint64_t cookie = 0;
  std::vector<std::pair<std::string, uint64_t>> globals;
};

ProbeSpec parse_probe(const std::string& text, const std::string& bpf_dir) {
  ProbeSpec p;
  p.text = text;
  std::string head = text.substr(0, text.find('@'));
  for (size_t at = text.find('@'); at != std::string::npos;) {
    size_t next = text.find('@', at + 1);
    std::string kv = text.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    auto eq = kv.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--probe " + text + ": want NAME=VALUE after @");
    uint64_t v = std::stoull(kv.substr(eq + 1), nullptr, 0);
    if (kv.substr(0, eq) == "cookie") p.cookie = v;
    else p.globals.emplace_back(kv.substr(0, eq), v);
    at = next;
  }
  auto colon = head.find(':');
  p.object = head.substr(0, colon);
  std::string progs = colon == std::string::npos ? "" : head.substr(colon + 1);
  auto comma = progs.find(',');
  p.entry = progs.substr(0, comma);
  p.ret = comma == std::string::npos ? "" : progs.substr(comma + 1);
  if (p.object.find('/') == std::string::npos) p.object = bpf_dir + "/" + p.object;
  return p;
}

// Sets global NAME of an opened (not yet loaded) object through its BTF: the variable's section map and offset.
std::string set_global(bpf_object* obj, const std::string& name, uint64_t value) {
  const btf* b = bpf_object__btf(obj);
  if (!b) return "no BTF in the object";
  for (uint32_t id = 1; id < btf__type_cnt(b); ++id) {
    const btf_type* t = btf__type_by_id(b, id);
    if (!btf_is_datasec(t)) continue;
    std::string sec = btf__name_by_offset(b, t->name_off);
    const btf_var_secinfo* vs = btf_var_secinfos(t);
    for (uint16_t i = 0; i < btf_vlen(t); ++i, ++vs) {
      const btf_type* var = btf__type_by_id(b, vs->type);
      if (name != btf__name_by_offset(b, var->name_off)) continue;
      bpf_map* m = nullptr;
      bpf_object__for_each_map(m, obj) {
        std::string mn = bpf_map__name(m);
        if (mn.size() >= sec.size() && mn.compare(mn.size() - sec.size(), sec.size(), sec) == 0) break;
      }
      size_t size = 0;
      const auto* data = m ? static_cast<const uint8_t*>(bpf_map__initial_value(m, &size)) : nullptr;
      if (!data || vs->offset + vs->size > size || vs->size > sizeof value) return "cannot write " + name;
      std::vector<uint8_t> image(data, data + size);
      std::memcpy(image.data() + vs->offset, &value, vs->size);  // little-endian: the low bytes
      return bpf_map__set_initial_value(m, image.data(), size) == 0 ? "" : "cannot set " + name;
    }
  }
  return "no global " + name + " in the object";
}

// stackscope's programs from its built object: ENTRY (and RETURN) attached to the target with cookie 0 (call id 0,
// no argument captures), the object's `events` ring buffer drained by a thread. woken: the thread sleeps in epoll as
// the recorder's poller does, so a record that finds it caught up wakes it (an irq_work, a self-IPI: a VM exit in
// a VM); otherwise it drains every 10 ms without sleeping in epoll and records wake nobody.
Row measure_object(const ProbeSpec& spec, uint64_t calls, bool woken) {
  const auto& [target, fn] = kTargets.front();
  const std::string &object = spec.object, &entry = spec.entry, &ret = spec.ret;
  Row row{spec.text};
  bpf_object* obj = bpf_object__open_file(object.c_str(), nullptr);
  if (!obj) {
    row.error = "cannot open " + object;
    return row;
  }
  for (const auto& [name, value] : spec.globals)
    if (std::string e = set_global(obj, name, value); !e.empty() && row.error.empty()) row.error = e;
  bpf_program *pe = nullptr, *pr = nullptr, *p = nullptr;
  bpf_object__for_each_program(p, obj) {
    std::string n = bpf_program__name(p);
    if (n == entry) pe = p;
    else if (!ret.empty() && n == ret) pr = p;
    else bpf_program__set_autoload(p, false);  // only the measured programs need to load
  }
  std::vector<bpf_link*> links;
  ring_buffer* rb = nullptr;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> records{0};
  std::thread poller;
  if (!row.error.empty()) {
    // a global could not be set: nothing is attached
  } else if (!pe || (!ret.empty() && !pr)) {
    std::string names;
    bpf_object__for_each_program(p, obj) names += std::string(names.empty() ? "" : ",") + bpf_program__name(p);
    row.error = "program not in " + object + " (it has: " + names + ")";
  } else if (int e = bpf_object__load(obj)) {
    row.error = "load " + object + ": " + std::to_string(e);
  } else {
    for (auto [prog, is_ret] : {std::pair{pe, false}, std::pair{pr, true}}) {
      if (!prog) continue;
      if (bpf_link* l = attach(prog, target, is_ret, spec.cookie, row.error)) links.push_back(l);
    }
    if (bpf_map* m = bpf_object__find_map_by_name(obj, "events"); m && bpf_map__type(m) == BPF_MAP_TYPE_RINGBUF) {
      rb = ring_buffer__new(
          bpf_map__fd(m), [](void* ctx, void*, size_t) { return ++*static_cast<std::atomic<uint64_t>*>(ctx), 0; },
          &records, nullptr);
      if (rb)
        poller = std::thread([&] {
          while (!stop) {
            if (woken) {
              ring_buffer__poll(rb, 100);
            } else {
              ring_buffer__consume(rb);
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
          }
          ring_buffer__consume(rb);
        });
    }
    if (row.error.empty()) row.ns = ns_per_call(fn, calls);
  }
  for (auto* l : links) bpf_link__destroy(l);
  stop = true;
  if (poller.joinable()) poller.join();
  row.hits = records;
  ring_buffer__free(rb);
  bpf_object__close(obj);
  return row;
}

// What a uprobe on SYMBOL of LIBRARY traps on: its first instruction's bytes and whether the kernel emulates it
// (x86-64: push, nop, jmp/call) or single-steps it out of line (a second trap: endbr64, mov, lea, sub ...).
nlohmann::json first_instruction(const std::string& spec) {
  auto colon = spec.find(':');
  nlohmann::json j = {{"spec", spec}};
  if (colon == std::string::npos) return j["error"] = "want LIBRARY:SYMBOL", j;
  std::string path = spec.substr(0, colon), sym = spec.substr(colon + 1);
  try {
    auto img = stackscope::trace::ElfImage::open(path);
    const auto* s = img->find(sym);
    if (!s) return j["error"] = "no function symbol " + sym, j;
    auto bytes = img->read_at(s->vaddr, 8);
    if (!bytes || bytes->size() < 4) return j["error"] = "cannot read its code", j;
    auto b = [&](size_t i) { return static_cast<uint8_t>((*bytes)[i]); };
    std::string hex;
    for (size_t i = 0; i < 8 && i < bytes->size(); ++i) hex += fmt::format("{:02x} ", b(i));
#if defined(__x86_64__)
    const char* kind = "other: single-stepped out of line (two traps)";
    if (b(0) == 0xf3 && b(1) == 0x0f && b(2) == 0x1e && b(3) == 0xfa)
      kind = "endbr64: single-stepped out of line (two traps); the instruction after it (+4) may be emulated";
    else if ((b(0) >= 0x50 && b(0) <= 0x57) || (b(0) == 0x41 && b(1) >= 0x50 && b(1) <= 0x57))
      kind = "push: emulated (one trap)";
    else if (b(0) == 0x90 || b(0) == 0xe9 || b(0) == 0xeb || b(0) == 0xe8)
      kind = "nop/jmp/call: emulated (one trap)";
#else
    const char* kind = "not classified on this architecture";
#endif
    j["bytes"] = hex;
    j["kind"] = kind;
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Cost per call of a uprobe, a uretprobe and stackscope's probe programs on one tiny function"};
  uint64_t calls = 1'000'000;
  // The build tree's gen/ (BUILD/bench/uprobe_cost -> BUILD/gen), else gen/ beside a copied binary.
  std::string exe_dir = self_path().substr(0, self_path().rfind('/'));
  std::string bpf_dir = exe_dir + "/../gen";
  if (::access((bpf_dir + "/cuda.bpf.o").c_str(), R_OK) != 0) bpf_dir = exe_dir + "/gen";
  std::string json_out;
  std::vector<std::string> probes = {"cuda.bpf.o:call_entry,call_return", "torch.bpf.o:op_entry,op_return"};
  app.add_option("-n,--calls", calls, "Calls per measurement (default 1000000)")->check(CLI::PositiveNumber);
  app.add_option("--bpf-dir", bpf_dir, "Where stackscope's *.bpf.o are (default: ../gen or gen/ beside this binary)");
  app.add_option("--probe", probes,
                 "OBJECT:ENTRY[,RETURN][@cookie=N][@GLOBAL=VALUE] of stackscope's programs to time (repeatable; "
                 "e.g. torch.bpf.o:op_entry,op_return@aggregate=1)");
  app.add_option("--json", json_out, "Write the figures as JSON here");
  std::vector<std::string> first_insn;
  app.add_option("--first-insn", first_insn,
                 "LIBRARY:SYMBOL (repeatable): print the instruction a uprobe on it traps on, emulated or "
                 "single-stepped (x86-64), e.g. /path/libcudart.so.13:cudaLaunchKernel");
  bool only_first_insn = false;
  app.add_flag("--first-insn-only", only_first_insn, "Only the --first-insn report, no timing");
  CLI11_PARSE(app, argc, argv);
  if (::geteuid() != 0) std::cerr << "uprobe_cost: not root: the probed rows will fail to attach\n";
  rlimit rl{RLIM_INFINITY, RLIM_INFINITY};
  ::setrlimit(RLIMIT_MEMLOCK, &rl);
  libbpf_set_print([](libbpf_print_level level, const char* fmt, va_list ap) {
    return level == LIBBPF_WARN ? std::vfprintf(stderr, fmt, ap) : 0;
  });

  nlohmann::json insns = nlohmann::json::array();
  for (const auto& spec : first_insn) {
    insns.push_back(first_instruction(spec));
    const auto& r = insns.back();
    std::printf("first instruction of %s: %s\n", spec.c_str(),
                r.contains("error") ? ("? " + r["error"].get<std::string>()).c_str()
                                    : (r["bytes"].get<std::string>() + "-> " + r["kind"].get<std::string>()).c_str());
  }
  if (only_first_insn) {
    if (!json_out.empty()) std::ofstream(json_out) << nlohmann::json{{"first_instructions", insns}}.dump(1) << "\n";
    return 0;
  }
  // Each row is printed (and the JSON rewritten) as soon as it is measured: a run cut short keeps what it had.
  nlohmann::json j = {{"calls", calls}, {"rows", nlohmann::json::array()}, {"first_instructions", insns}};
  PerCall bare;
  std::printf("%-64s %12s %14s %12s %14s %10s\n", "probe", "wall ns/call", "added (wall)", "cpu ns/call",
              "added (cpu)", "hits");
  auto report = [&](const Row& r) {
    if (!r.error.empty()) {
      std::printf("%-64s %s\n", r.name.c_str(), ("not measured: " + r.error).c_str());
      j["rows"].push_back({{"name", r.name}, {"error", r.error}});
    } else {
      std::printf("%-64s %12.1f %14.1f %12.1f %14.1f %10llu\n", r.name.c_str(), r.ns.wall_ns,
                  r.ns.wall_ns - bare.wall_ns, r.ns.cpu_ns, r.ns.cpu_ns - bare.cpu_ns,
                  static_cast<unsigned long long>(r.hits));
      j["rows"].push_back({{"name", r.name}, {"wall_ns_per_call", r.ns.wall_ns},
                           {"added_wall_ns_per_call", r.ns.wall_ns - bare.wall_ns}, {"cpu_ns_per_call", r.ns.cpu_ns},
                           {"added_cpu_ns_per_call", r.ns.cpu_ns - bare.cpu_ns}, {"hits", r.hits}});
    }
    std::fflush(stdout);
    if (!json_out.empty()) std::ofstream(json_out) << j.dump(1) << "\n";
  };
  const auto& [first_name, first_fn] = kTargets.front();
  ns_per_call(first_fn, calls / 10 + 1);  // page in, settle the clock
  bare = ns_per_call(first_fn, calls);
  report(Row("bare", bare));
  if (auto* skel = uprobe_cost_bpf__open_and_load()) {
    auto run = [&](const std::string& name, const char* target, Target fn, bool entry, bool ret) {
      Row r{name};
      std::vector<bpf_link*> links;
      if (entry) links.push_back(attach(skel->progs.minimal_entry, target, false, 0, r.error));
      if (ret) links.push_back(attach(skel->progs.minimal_return, target, true, 0, r.error));
      skel->bss->entry_hits = skel->bss->return_hits = 0;
      if (r.error.empty()) r.ns = ns_per_call(fn, calls);
      r.hits = std::max(skel->bss->entry_hits, skel->bss->return_hits);
      for (auto* l : links) bpf_link__destroy(l);
      report(r);
    };
    auto first_insn_of = [](const char* target) { return std::string(target + std::strlen("ss_target_")); };
    for (const auto& [target, fn] : kTargets)
      run("uprobe (minimal), function starts with " + first_insn_of(target), target, fn, true, false);
    run("uretprobe (minimal), " + first_insn_of(first_name), first_name, first_fn, false, true);
    run("uprobe + uretprobe (minimal), " + first_insn_of(first_name), first_name, first_fn, true, true);
    uprobe_cost_bpf__destroy(skel);
  } else {
    Row r("uprobe (minimal program)");
    r.error = "cannot load uprobe_cost.bpf.o: " + std::to_string(-errno);
    report(r);
  }
  for (const auto& text : probes) {
    ProbeSpec spec;
    try {
      spec = parse_probe(text, bpf_dir);
    } catch (const std::exception& e) {
      Row r("stackscope " + text);
      r.error = std::string("bad --probe: ") + e.what();
      report(r);
      continue;
    }
    for (bool woken : {true, false}) {
      Row r = measure_object(spec, calls, woken);
      r.name = "stackscope " + text + (woken ? ", reader woken" : ", reader every 10ms");
      report(r);
    }
  }
  return 0;
}
