// The cuda family (bpf/cuda.bpf.c): entry and return probes on the CUDA runtime and driver calls of the call catalog
// (trace/probe_catalog.h).
#pragma once
#include <map>
#include <utility>
#include <vector>

#include "trace/probe_family.h"
#include "trace/proc_maps.h"

struct cuda_bpf;

namespace stackscope::trace {

class CudaProbes final : public SkeletonFamily<cuda_bpf> {
 public:
  const char* name() const override { return "cuda"; }
  std::string load(uint32_t ringbuf_bytes, bool uprobe_multi) override;
  Layer layer() const override { return Layer::cuda; }
  // The catalog's runtime and driver calls in libcudart and libcuda; under the cost budget the blocking ones are
  // steady (never duty-cycled), the asynchronous ones entry-only.
  LibraryProbes probes_for(const MappedLibrary& lib, const ElfImage& img, const ProbeContext& ctx) override;
  // The address ranges of the CUDA libraries in `pid` (from its maps): a driver call made inside the runtime is
  // folded into the runtime call (bpf/call_probe.bpf.h).
  void update_fold_ranges(uint32_t pid, const std::vector<MapEntry>& maps);
  void forget(uint32_t pid);

 private:
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> fold_ranges_;  // pid -> CUDA library code (maintainer)
};

}  // namespace stackscope::trace
