#include "trace/pystack_probes.h"

#include <bpf/bpf.h>

#include <utility>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "events.h"
#include "pystack.skel.h"
#include "trace/python_offsets.h"

namespace stackscope::trace {

std::string PyStackProbes::load(uint32_t ringbuf_bytes, bool uprobe_multi) {
  return load_skeleton(pystack_bpf__open, pystack_bpf__load, pystack_bpf__destroy, ringbuf_bytes, uprobe_multi,
                       [&](pystack_bpf* s) { s->rodata->offcpu_min_ns = offcpu_min_ns_; });
}

bool PyStackProbes::register_process(uint32_t pid, const std::vector<MapEntry>& maps, const MappedLibrary& lib,
                                     const ElfImage& img, const Note& note) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sampled_.count(pid)) return true;
  }
  if (!img.find("Py_Initialize") && !img.find("_PyEval_EvalFrameDefault")) return false;  // not an interpreter
  const auto version = python_version(img);
  const ss_py_offsets* offsets = version ? python_offsets(*version) : nullptr;
  const std::string vtext = version ? fmt::format("{}.{}", version->major, version->minor) : "of unknown version";
  if (!offsets) {  // auto: USDT where it has the probes
    if (mode_ == "stack")
      note(fmt::format("{}: CPython {} has no stack offsets in stackscope (3.11, 3.12): not sampled", lib.path, vtext));
    return false;
  }
  const auto runtime_vaddr = img.find_object("_PyRuntime");
  // The file's lowest mapping gives the load bias: address = vaddr - vaddr(mapping offset) + mapping start.
  const MapEntry* first = nullptr;
  for (auto& m : maps)
    if (m.inode == lib.inode && m.dev == lib.dev && (!first || m.offset < first->offset)) first = &m;
  const auto first_vaddr = first ? img.offset_to_vaddr(first->offset) : std::nullopt;
  if (!runtime_vaddr || !first_vaddr) {
    note(lib.path + ": no _PyRuntime symbol (or mapping) to find the interpreter from: not sampled");
    return false;
  }
  ss_py_proc proc{};
  proc.runtime = *runtime_vaddr - *first_vaddr + first->start;
  proc.off = *offsets;
  if (!attach(note)) return false;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.py_procs), &pid, &proc, BPF_ANY) != 0) {
    note(fmt::format("python stack sampler: cannot register pid {}: {}", pid, std::strerror(errno)));
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    sampled_.insert(pid);
  }
  note(fmt::format("{}: CPython {}: Python stacks sampled on CPU at {} Hz and at every block of >= {} us "
                   "(--python-mode stack)",
                   lib.path, vtext, sample_hz_, offcpu_min_ns_ / 1000));
  return true;
}

void PyStackProbes::forget(uint32_t pid, bool exited) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    sampled_.erase(pid);
  }
  // Whether or not user space registered it: the kernel registers a forked child itself (on_fork), and a child
  // that exits before its rescan would stay registered for the next process given its pid.
  if (exited && skel_) bpf_map_delete_elem(bpf_map__fd(skel_->maps.py_procs), &pid);
}

bool PyStackProbes::attach(const Note& note) {
  if (attached_) return true;
  for (bpf_program* prog : {skel_->progs.on_switch, skel_->progs.on_fork, skel_->progs.on_exec}) {
    bpf_link* l = bpf_program__attach(prog);
    if (!l) {
      note(fmt::format("python stack sampler: {}: {}: not sampled", bpf_program__name(prog), std::strerror(errno)));
      // Detach what was attached: the next Python process tries again, and must not attach it a second time.
      for (bpf_link* attached : links_) bpf_link__destroy(attached);
      links_.clear();
      return false;
    }
    links_.push_back(l);
  }
  // A CPU-clock sampler on every CPU (a software event: works without a PMU, in VMs); the BPF program keeps only
  // registered Python processes. Offline CPUs refuse it.
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.sample_period = 1'000'000'000ull / static_cast<uint64_t>(std::max(1, sample_hz_));  // ns
  size_t cpus = 0;
  for (int cpu = 0; cpu < libbpf_num_possible_cpus(); ++cpu) {
    int fd = static_cast<int>(::syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) continue;
    bpf_link* l = bpf_program__attach_perf_event(skel_->progs.on_cpu_sample, fd);
    if (!l) {
      ::close(fd);
      continue;
    }
    links_.push_back(l);  // destroying the link closes the event
    ++cpus;
  }
  if (cpus == 0)
    note(std::string("python stack sampler: no CPU-clock perf event (") + std::strerror(errno) +
         "): blocked time only");
  attached_ = true;
  return true;
}

std::vector<bpf_link*> PyStackProbes::take_links() {
  attached_ = false;
  return std::exchange(links_, {});
}

std::string PyStackProbes::cost() const {
  std::string cost;
  if (!attached_ || !skel_) return cost;
  for (bpf_program* prog : {skel_->progs.on_cpu_sample, skel_->progs.on_switch}) {
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) == 0 && info.run_cnt && info.run_time_ns)
      cost += fmt::format("{}{}: {} runs, {:.0f} ns/run", cost.empty() ? "" : "; ", bpf_program__name(prog),
                          info.run_cnt, static_cast<double>(info.run_time_ns) / static_cast<double>(info.run_cnt));
  }
  return cost;
}

}  // namespace stackscope::trace
