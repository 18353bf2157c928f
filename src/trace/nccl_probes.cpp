#include "trace/nccl_probes.h"

#include <bpf/bpf.h>

#include "nccl.skel.h"
#include "events.h"

namespace stackscope::trace {

std::string NcclProbes::load(uint32_t ringbuf_bytes, bool uprobe_multi) {
  return load_skeleton(nccl_bpf__open, nccl_bpf__load, nccl_bpf__destroy, ringbuf_bytes, uprobe_multi,
                       [](nccl_bpf*) {}, call_probe_handles<nccl_bpf>);
}

LibraryProbes NcclProbes::probes_for(const MappedLibrary& lib, const ElfImage& img, const ProbeContext& ctx) {
  if (lib.kind != LibraryKind::nccl) return {};
  return {catalog_probes(*ctx.specs, Layer::nccl, lib.kind, img, ctx.full_detail, false)};
}

}  // namespace stackscope::trace
