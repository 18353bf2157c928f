#include "trace/nccl_probes.h"

#include <bpf/bpf.h>

#include "nccl.skel.h"
#include "events.h"

namespace stackscope::trace {

std::string NcclProbes::load(uint32_t ringbuf_bytes, bool uprobe_multi) {
  return open_and_load(skel_, nccl_bpf__open, nccl_bpf__load, nccl_bpf__destroy, ringbuf_bytes, uprobe_multi,
                       [](nccl_bpf*) {});
}

void NcclProbes::destroy() {
  if (skel_) nccl_bpf__destroy(skel_);
  skel_ = nullptr;
}

bpf_object* NcclProbes::object() const { return skel_ ? skel_->obj : nullptr; }
bpf_map* NcclProbes::events() const { return skel_ ? skel_->maps.events : nullptr; }
const bpf_map* NcclProbes::counters() const { return skel_ ? skel_->maps.counters : nullptr; }
uint32_t* NcclProbes::capture_flag() const { return skel_ ? &skel_->data->capture_enabled : nullptr; }
bpf_map* NcclProbes::thread_map() const { return skel_ ? skel_->maps.call_threads : nullptr; }

FamilyProgs NcclProbes::progs() const {
  if (!skel_) return {};
  return {skel_->progs.call_entry, skel_->progs.call_return, skel_->progs.call_entry_multi,
          skel_->progs.call_return_multi};
}

LibraryProbes NcclProbes::probes_for(const MappedLibrary& lib, const ElfImage& img, const ProbeContext& ctx) {
  if (lib.kind != LibraryKind::nccl) return {};
  return {catalog_probes(*ctx.specs, Layer::nccl, lib.kind, img, ctx.full_detail, false)};
}

}  // namespace stackscope::trace
