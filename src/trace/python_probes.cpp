#include "trace/python_probes.h"

#include "python.skel.h"

namespace stackscope::trace {

std::string PythonProbes::load(uint32_t ringbuf_bytes, bool uprobe_multi) {
  return open_and_load(skel_, python_bpf__open, python_bpf__load, python_bpf__destroy, ringbuf_bytes, uprobe_multi,
                       [&](python_bpf* s) { s->rodata->min_duration_ns = min_duration_ns_; });
}

void PythonProbes::destroy() {
  if (skel_) python_bpf__destroy(skel_);
  skel_ = nullptr;
}

bpf_object* PythonProbes::object() const { return skel_ ? skel_->obj : nullptr; }
bpf_map* PythonProbes::events() const { return skel_ ? skel_->maps.events : nullptr; }
const bpf_map* PythonProbes::counters() const { return skel_ ? skel_->maps.counters : nullptr; }
uint32_t* PythonProbes::capture_flag() const { return skel_ ? &skel_->data->capture_enabled : nullptr; }
bpf_map* PythonProbes::thread_map() const { return skel_ ? skel_->maps.call_threads : nullptr; }

FamilyProgs PythonProbes::progs() const {
  if (!skel_) return {};
  return {skel_->progs.call_entry, skel_->progs.call_return, skel_->progs.call_entry_multi,
          skel_->progs.call_return_multi};
}

bool PythonProbes::attach_usdt(int pid_filter, const std::string& host_path, std::vector<bpf_link*>& links) {
  bpf_link* e = bpf_program__attach_usdt(skel_->progs.py_entry, pid_filter, host_path.c_str(), "python",
                                         "function__entry", nullptr);
  bpf_link* r = e ? bpf_program__attach_usdt(skel_->progs.py_return, pid_filter, host_path.c_str(), "python",
                                             "function__return", nullptr)
                  : nullptr;
  if (e && r) {
    links.push_back(e);
    links.push_back(r);
    return true;
  }
  if (e) {
    const int saved = errno;
    bpf_link__destroy(e);
    errno = saved;
  }
  return false;
}

}  // namespace stackscope::trace
