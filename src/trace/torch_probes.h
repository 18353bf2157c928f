// The torch family (bpf/torch.bpf.c): probes on the at::_ops::<op>::call entry points of libtorch_cpu. In full
// detail each call is a record; otherwise the kernel counts calls, time and a duration histogram per operator,
// which sample_ops() turns into series.
#pragma once
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "model/collector.h"
#include "trace/elf_symbols.h"
#include "trace/probe_catalog.h"
#include "trace/probe_family.h"
#include "trace/symbol_names.h"

struct torch_bpf;

namespace stackscope::trace {

class TorchProbes final : public SkeletonFamily<torch_bpf> {
 public:
  // `patterns`: the operators to probe (record --torch-ops; default_torch_ops() when empty).
  TorchProbes(bool aggregate, std::vector<std::string> patterns)
      : aggregate_(aggregate), patterns_(patterns.empty() ? default_torch_ops() : std::move(patterns)) {}
  const char* name() const override { return "torch"; }
  std::string load(uint32_t ringbuf_bytes, bool uprobe_multi) override;
  Layer layer() const override { return Layer::torch; }
  // The operators of libtorch_cpu (see operator_probes).
  LibraryProbes probes_for(const MappedLibrary& lib, const ElfImage& img, const ProbeContext& ctx) override;

  // The operators of `img` matching `patterns` (their struct or operator name: symbol_names.h) as (file offset,
  // cookie = op id) probes, named as torch.profiler names them (aten::sum.dim_IntList); the ids are kept per image
  // so that every process mapping it shares them. Empty when none matched.
  std::vector<Probe> operator_probes(const ElfImage& img, const std::vector<std::string>& patterns);
  // The event name of operator `op_id`.
  std::string op_name(uint32_t op_id) const;
  // Aggregated mode: the kernel's running totals per operator as series (calls, time, p50, p99 of the interval).
  void sample_ops(TelemetrySink& sink, const std::string& host);
  // Under the cost budget, the CUDA runtime's blocking synchronisations (the call catalog's cudaDeviceSynchronize,
  // cudaStreamSynchronize, cudaEventSynchronize, cudaMemcpy): steady entry probes that delimit the job's steps for the
  // estimate of its unwatched calls (model/sampled_count.h, estimate_from_sync_intervals).
  std::vector<Probe> probes_beside(const MappedLibrary& lib, const ElfImage& img, const ProbeContext& ctx) override;
  // Synchronisations made so far by the traced processes (-1: not loaded).
  int64_t syncs_so_far() const;
  // What the processes did in the counted window that just closed (bpf/events.h, struct ss_step_window), summed:
  // calls counted, those of the processes that synchronised in it, and the complete intervals between syncs.
  struct StepWindow {
    uint64_t calls = 0, syncing_calls = 0, interval_calls = 0, intervals = 0;
  };
  StepWindow read_step_windows() const;
  // Forgets the last window's (before the next one opens).
  void clear_step_windows();
  // The calls that the operators' series have counted so far, all operators together (aggregated mode).
  uint64_t calls_in_series() const;
  // The operators that the series have counted calls of so far (ids: the probes' cookies), in id order.
  std::vector<uint32_t> ops_counted() const;
  // Of the operator calls counted so far, the share of those whose id `mod` divides (the cost budget's entry-only
  // windows probe those: model/sampled_count.h); 0 before any.
  double share_of_ops_divisible_by(uint32_t mod) const;

 private:
  bool aggregate_;
  std::vector<std::string> patterns_;
  mutable std::mutex mu_;  // names_, ops_by_image_
  std::vector<std::string> names_;                                                 // op id -> event name
  std::map<std::string, std::vector<std::pair<uint32_t, uint64_t>>> ops_by_image_;  // image -> (op id, vaddr)
  // Running totals already sent, series per operator (the sampling thread only).
  struct OpSeries {
    SeriesId calls = 0, time = 0, p50 = 0, p99 = 0;
    uint64_t count = 0, total_ns = 0;
    std::array<uint64_t, 32> hist{};
  };
  std::map<uint32_t, OpSeries> op_series_;
};

}  // namespace stackscope::trace
