#include "trace/python_probes.h"

#include "python.skel.h"

namespace stackscope::trace {

std::string PythonProbes::load(uint32_t ringbuf_bytes, bool uprobe_multi) {
  return load_skeleton(python_bpf__open, python_bpf__load, python_bpf__destroy, ringbuf_bytes, uprobe_multi,
                       [&](python_bpf* s) { s->rodata->min_duration_ns = min_duration_ns_; },
                       call_probe_handles<python_bpf>);
}

LibraryProbes PythonProbes::probes_for(const MappedLibrary& lib, const ElfImage& img, const ProbeContext& ctx) {
  if (lib.kind != LibraryKind::python) return {};
  if (!img.find("Py_Initialize") && !img.find("_PyEval_EvalFrameDefault")) return {};  // not an interpreter
  const bool usdt = img.has_usdt("python", "function__entry") && img.has_usdt("python", "function__return");
  auto note = [&](const std::string& text) {
    if (ctx.note_once) ctx.note_once(text);
  };
  // Without USDT, timing C-API entry points hits a uprobe on nearly every Python call: measured at 4-14% of a GPT-2
  // step on the GPU machine (docs/benchmarks/probe-cost.md), so "auto" leaves it off and says how to opt in.
  if ((mode_ == "usdt" || mode_ == "auto") && !usdt) {
    // Under auto, stack sampling was tried first and said why it could not register (its own note).
    note(lib.path + ": no python:function__entry USDT probes" +
         (mode_ == "auto" ? std::string(" and no stack sampling (see above)") : std::string()) +
         "; python layer not traced there (--python-mode stack for CPython 3.11/3.12, or --python-mode capi to time "
         "C-API calls, at several % of step time)");
    return {};
  }
  if (usdt && mode_ != "capi") return {{}, true};
  if (!duty_cycled_) note(lib.path + ": no function-level USDT probes; timing C-API entry points instead");
  return {catalog_probes(*ctx.specs, Layer::python, lib.kind, img, ctx.full_detail, false)};
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
