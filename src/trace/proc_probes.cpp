#include "trace/proc_probes.h"

#include <bpf/bpf.h>

#include <utility>

#include "proc.skel.h"

namespace stackscope::trace {

std::string ProcProbes::load(uint32_t ringbuf_bytes, bool uprobe_multi) {
  return load_skeleton(proc_bpf__open, proc_bpf__load, proc_bpf__destroy, ringbuf_bytes, uprobe_multi,
                       [&](proc_bpf* s) {
                         s->rodata->all_processes = all_processes_;
                         s->rodata->follow_children = follow_children_;
                       });
}

bpf_program* ProcProbes::calibrate() const { return skel_ ? skel_->progs.calibrate : nullptr; }
bpf_program* ProcProbes::calibrate_multi() const { return skel_ ? skel_->progs.calibrate_multi : nullptr; }

bool ProcProbes::attach_lifecycle(std::string* err, const std::function<void(const std::string&)>& note) {
  struct {
    bpf_program* prog;
    bpf_link** link;
    bool required;
  } progs[] = {{skel_->progs.on_fork, &skel_->links.on_fork, true},
               {skel_->progs.on_exec, &skel_->links.on_exec, true},
               {skel_->progs.on_exit, &skel_->links.on_exit, true},
               {skel_->progs.on_mmap_enter, &skel_->links.on_mmap_enter, false},
               {skel_->progs.on_mmap_exit, &skel_->links.on_mmap_exit, false}};
  for (auto& p : progs) {
    *p.link = bpf_program__attach(p.prog);
    if (!*p.link) {
      *err = std::string(bpf_program__name(p.prog)) + ": " + std::strerror(errno);
      if (p.required) return false;
      note("no syscall tracepoints: dlopen is found by periodic rescans only (" + *err + ")");
    }
  }
  return true;
}

std::vector<bpf_link*> ProcProbes::take_links() {
  std::vector<bpf_link*> links;
  if (!skel_) return links;
  // Each detach waits for the kernel, so the caller destroys them with the others.
  for (bpf_link** l : {&skel_->links.on_fork, &skel_->links.on_exec, &skel_->links.on_exit,
                       &skel_->links.on_mmap_enter, &skel_->links.on_mmap_exit})
    if (*l) links.push_back(std::exchange(*l, nullptr));
  return links;
}

void ProcProbes::trace_pid(uint32_t pid) {
  uint8_t one = 1;
  if (skel_) bpf_map_update_elem(bpf_map__fd(skel_->maps.traced), &pid, &one, BPF_ANY);
}

}  // namespace stackscope::trace
