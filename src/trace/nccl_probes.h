// The nccl family (bpf/nccl.bpf.c): entry and return probes on the NCCL library calls of the call catalog.
#pragma once
#include <map>
#include <utility>
#include <vector>

#include "trace/probe_family.h"
#include "trace/proc_maps.h"

struct nccl_bpf;

namespace stackscope::trace {

class NcclProbes final : public SkeletonFamily<nccl_bpf> {
 public:
  const char* name() const override { return "nccl"; }
  std::string load(uint32_t ringbuf_bytes, bool uprobe_multi) override;
  Layer layer() const override { return Layer::nccl; }
  LibraryProbes probes_for(const MappedLibrary& lib, const ElfImage& img, const ProbeContext& ctx) override;
};

}  // namespace stackscope::trace
