// Turns fixed-size BPF records (bpf/events.h) into stackscope::Event: names arguments, computes NCCL bytes from
// the datatype, tracks comm -> rank and CUfunction -> kernel name per process. No BPF here, so it is unit-tested.
// Used from one thread (the ring-buffer poller).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "events.h"
#include "model/event.h"
#include "trace/probe_catalog.h"

namespace stackscope::trace {

class RecordDecoder {
 public:
  // `kernel_name(pid, host_address)` names a kernel launched through its host stub ("" when unknown).
  using KernelNamer = std::function<std::string(uint32_t pid, uint64_t address)>;

  RecordDecoder(std::vector<CallSpec> specs, KernelNamer kernel_name);

  // nullopt for records that only update state (none today) or carry an unknown id.
  std::optional<Event> decode_call(const ss_call_record& r);
  // `name`: the operator's event name ("aten::addmm"), known to the attacher.
  Event decode_torch(const ss_torch_record& r, std::string name) const;
  Event decode_python(const ss_python_record& r) const;
  // Python stack sampling (--python-mode stack): a code object's names, sent once per process before any sample
  // that holds it; then samples become python-layer events named after their leaf function (see decode_pystack).
  void note_pycode(const ss_pycode_record& r);
  Event decode_pystack(const ss_pystack_record& r) const;
  void forget_process(uint32_t pid);

  const std::vector<CallSpec>& specs() const { return specs_; }

 private:
  struct CommInfo {
    int rank = -1, nranks = -1;
  };
  std::vector<CallSpec> specs_;
  KernelNamer kernel_name_;
  std::map<std::pair<uint32_t, uint64_t>, CommInfo> comms_;
  std::map<std::pair<uint32_t, uint64_t>, std::string> functions_;  // CUfunction -> name
  struct PyCode {
    std::string qualname, filename;
    int32_t firstlineno = 0;
  };
  std::map<std::pair<uint32_t, uint64_t>, PyCode> pycodes_;  // (pid, code object address) -> names
};

// "aten::add.Tensor" from the `at::_ops` struct name "add_Tensor": overload names in native_functions.yaml
// start upper-case or are `out`; the rest of the name is the operator.
std::string torch_event_name(const std::string& ops_struct);

}  // namespace stackscope::trace
