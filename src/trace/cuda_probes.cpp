#include "trace/cuda_probes.h"

#include <bpf/bpf.h>

#include "cuda.skel.h"
#include "events.h"

namespace stackscope::trace {

std::string CudaProbes::load(uint32_t ringbuf_bytes, bool uprobe_multi) {
  return open_and_load(skel_, cuda_bpf__open, cuda_bpf__load, cuda_bpf__destroy, ringbuf_bytes, uprobe_multi,
                       [](cuda_bpf*) {});
}

void CudaProbes::destroy() {
  if (skel_) cuda_bpf__destroy(skel_);
  skel_ = nullptr;
}

bpf_object* CudaProbes::object() const { return skel_ ? skel_->obj : nullptr; }
bpf_map* CudaProbes::events() const { return skel_ ? skel_->maps.events : nullptr; }
const bpf_map* CudaProbes::counters() const { return skel_ ? skel_->maps.counters : nullptr; }
uint32_t* CudaProbes::capture_flag() const { return skel_ ? &skel_->data->capture_enabled : nullptr; }
bpf_map* CudaProbes::thread_map() const { return skel_ ? skel_->maps.call_threads : nullptr; }

FamilyProgs CudaProbes::progs() const {
  if (!skel_) return {};
  return {skel_->progs.call_entry, skel_->progs.call_return, skel_->progs.call_entry_multi,
          skel_->progs.call_return_multi};
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
