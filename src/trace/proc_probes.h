// The proc family (bpf/proc.bpf.c): process lifecycle (fork, exec, exit) and mmap records that drive rescans, the
// set of traced processes, and the calibration probe that prices one uprobe hit.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "trace/probe_family.h"

struct proc_bpf;

namespace stackscope::trace {

class ProcProbes final : public SkeletonFamily<proc_bpf> {
 public:
  ProcProbes(bool all_processes, bool follow_children)
      : all_processes_(all_processes), follow_children_(follow_children) {}
  const char* name() const override { return "proc"; }
  Layer layer() const override { return Layer::host; }  // process lifecycle records
  std::string load(uint32_t ringbuf_bytes, bool uprobe_multi) override;

  // Attaches the lifecycle tracepoints. The mmap ones need syscall tracepoints (CONFIG_FTRACE_SYSCALLS): without
  // them `note` says so and rescans cover dlopen. False (with `err`) when a required one fails.
  bool attach_lifecycle(std::string* err, const std::function<void(const std::string&)>& note);
  // The lifecycle links, detached by the caller (release()).
  std::vector<bpf_link*> take_links();
  // Follows `pid` (the kernel adds its children where follow_children).
  void trace_pid(uint32_t pid);
  // The calibration program (counts hits only): single-probe and uprobe_multi.
  bpf_program* calibrate() const;
  bpf_program* calibrate_multi() const;

 private:
  bool all_processes_, follow_children_;
};

}  // namespace stackscope::trace
