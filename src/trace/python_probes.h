// The python family (bpf/python.bpf.c): Python function calls through the interpreter's USDT probes
// (function__entry/return), or, without them, entry and return probes on C-API entry points (--python-mode capi).
#pragma once
#include <vector>

#include "trace/probe_family.h"

struct python_bpf;

namespace stackscope::trace {

class PythonProbes final : public ProbeFamily {
 public:
  explicit PythonProbes(uint64_t min_duration_ns) : min_duration_ns_(min_duration_ns) {}
  ~PythonProbes() override { destroy(); }
  const char* name() const override { return "python"; }
  std::string load(uint32_t ringbuf_bytes, bool uprobe_multi) override;
  void destroy() override;
  bpf_object* object() const override;
  bpf_map* events() const override;
  const bpf_map* counters() const override;
  FamilyProgs progs() const override;
  uint32_t* capture_flag() const override;
  bpf_map* thread_map() const override;

  // Attaches the function__entry/return USDT programs to the interpreter at `host_path`; the two links (entry,
  // return) are appended to `links`. False (nothing attached, errno set) when either fails.
  bool attach_usdt(int pid_filter, const std::string& host_path, std::vector<bpf_link*>& links);

 private:
  uint64_t min_duration_ns_;
  python_bpf* skel_ = nullptr;
};

}  // namespace stackscope::trace
