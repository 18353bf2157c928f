// The python-stack family (bpf/pystack.bpf.c): Python stacks sampled from BPF, on CPU (a CPU-clock perf event per
// CPU) and at every block (sched_switch), for the CPython processes registered with it (--python-mode stack/auto).
#pragma once
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "trace/elf_symbols.h"
#include "trace/probe_family.h"
#include "trace/proc_maps.h"

struct pystack_bpf;

namespace stackscope::trace {

class PyStackProbes final : public SkeletonFamily<pystack_bpf> {
 public:
  using Note = std::function<void(const std::string&)>;
  // `mode` is --python-mode ("stack" says why an interpreter is not sampled; "auto" leaves that to USDT).
  PyStackProbes(std::string mode, int sample_hz, uint64_t offcpu_min_ns)
      : mode_(std::move(mode)), sample_hz_(sample_hz), offcpu_min_ns_(offcpu_min_ns) {}
  const char* name() const override { return "python-stack"; }
  Layer layer() const override { return Layer::python; }
  std::string load(uint32_t ringbuf_bytes, bool uprobe_multi) override;

  // Registers the interpreter `img` (mapped as `lib` in `pid`) with the sampler: its _PyRuntime address and its
  // version's offsets. True when the process is sampled (now or already); false when this interpreter is not for
  // the sampler (version, symbols) and the probe paths should handle it.
  bool register_process(uint32_t pid, const std::vector<MapEntry>& maps, const MappedLibrary& lib,
                        const ElfImage& img, const Note& note);
  bool sampled(uint32_t pid) const {
    std::lock_guard<std::mutex> lock(mu_);
    return sampled_.count(pid) > 0;
  }
  // The process exited (`exited`) or exec'd a new image: its interpreter is found again.
  void forget(uint32_t pid, bool exited);
  // The sampler's links, detached by the caller (release()); the next registration attaches them again.
  std::vector<bpf_link*> take_links();
  // The sampler's own cost where kernel.bpf_stats_enabled was on; "" otherwise.
  std::string cost() const;

 private:
  bool attach(const Note& note);  // perf events on every CPU and the scheduler tracepoints, at the first registration

  std::string mode_;
  int sample_hz_;
  uint64_t offcpu_min_ns_;
  mutable std::mutex mu_;  // sampled_
  std::set<uint32_t> sampled_;  // processes registered
  std::vector<bpf_link*> links_;  // maintainer thread, then release()
  bool attached_ = false;
};

}  // namespace stackscope::trace
