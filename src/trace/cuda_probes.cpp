#include "trace/cuda_probes.h"

#include <bpf/bpf.h>

#include "cuda.skel.h"
#include "events.h"

namespace stackscope::trace {

std::string CudaProbes::load(uint32_t ringbuf_bytes, bool uprobe_multi) {
  return load_skeleton(cuda_bpf__open, cuda_bpf__load, cuda_bpf__destroy, ringbuf_bytes, uprobe_multi,
                       [](cuda_bpf*) {}, call_probe_handles<cuda_bpf>);
}

LibraryProbes CudaProbes::probes_for(const MappedLibrary& lib, const ElfImage& img, const ProbeContext& ctx) {
  if (lib.kind != LibraryKind::cudart && lib.kind != LibraryKind::cuda_driver) return {};
  return {catalog_probes(*ctx.specs, Layer::cuda, lib.kind, img, ctx.full_detail, ctx.budgeted)};
}

void CudaProbes::update_fold_ranges(uint32_t pid, const std::vector<MapEntry>& maps) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto& m : maps) {
    if (!m.exec || ranges.size() >= SS_FOLD_RANGES) continue;
    auto kind = classify_library(m.path);
    if (kind == LibraryKind::cudart || kind == LibraryKind::cuda_driver) ranges.emplace_back(m.start, m.end);
  }
  if (!skel_ || ranges.empty() || fold_ranges_[pid] == ranges) return;
  fold_ranges_[pid] = ranges;
  ss_fold_ranges value{};
  for (size_t i = 0; i < ranges.size(); ++i) {
    value.lo[i] = ranges[i].first;
    value.hi[i] = ranges[i].second;
  }
  bpf_map_update_elem(bpf_map__fd(skel_->maps.fold_ranges), &pid, &value, BPF_ANY);
}

void CudaProbes::forget(uint32_t pid) {
  if (skel_) bpf_map_delete_elem(bpf_map__fd(skel_->maps.fold_ranges), &pid);
  fold_ranges_.erase(pid);
}

}  // namespace stackscope::trace
