// The python family (bpf/python.bpf.c): Python function calls through the interpreter's USDT probes
// (function__entry/return), or, without them, entry and return probes on C-API entry points (--python-mode capi).
#pragma once
#include <string>
#include <vector>

#include "trace/probe_family.h"

struct python_bpf;

namespace stackscope::trace {

class PythonProbes final : public SkeletonFamily<python_bpf> {
 public:
  // `mode`: --python-mode (usdt, capi, auto; stack mode never loads this family). `duty_cycled`: the C-API probes
  // have a fixed duty cycle (--python-duty), which says so in its own note.
  PythonProbes(uint64_t min_duration_ns, std::string mode, bool duty_cycled)
      : min_duration_ns_(min_duration_ns), mode_(std::move(mode)), duty_cycled_(duty_cycled) {}
  const char* name() const override { return "python"; }
  std::string load(uint32_t ringbuf_bytes, bool uprobe_multi) override;
  Layer layer() const override { return Layer::python; }
  // An interpreter's function__entry/return USDT probes where it has them (and the mode is not capi); else, under
  // --python-mode capi, probes on the C-API entry points of the catalog (python_capi_spec).
  LibraryProbes probes_for(const MappedLibrary& lib, const ElfImage& img, const ProbeContext& ctx) override;
  // Attaches the function__entry/return USDT programs to the interpreter at `host_path`; the two links (entry,
  // return) are appended to `links`. False (nothing attached, errno set) when either fails.
  bool attach_usdt(int pid_filter, const std::string& host_path, std::vector<bpf_link*>& links) override;

 private:
  uint64_t min_duration_ns_;
  std::string mode_;
  bool duty_cycled_;
};

}  // namespace stackscope::trace
