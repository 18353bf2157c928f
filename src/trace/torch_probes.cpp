#include "trace/torch_probes.h"

#include <bpf/bpf.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "events.h"
#include "model/clock.h"
#include "torch.skel.h"
#include "trace/probe_catalog.h"
#include "trace/record_decoder.h"
#include "trace/symbol_names.h"

namespace stackscope::trace {

std::string TorchProbes::load(uint32_t ringbuf_bytes, bool uprobe_multi) {
  return load_skeleton(torch_bpf__open, torch_bpf__load, torch_bpf__destroy, ringbuf_bytes, uprobe_multi,
                       [&](torch_bpf* s) { s->rodata->aggregate = aggregate_; }, [](torch_bpf* s) {
                         return UprobeHandles{s->maps.torch_threads, &s->data->capture_enabled,
                                              {s->progs.op_entry, s->progs.op_return, s->progs.op_entry_multi,
                                               s->progs.op_return_multi}};
                       });
}

LibraryProbes TorchProbes::probes_for(const MappedLibrary& lib, const ElfImage& img, const ProbeContext& ctx) {
  if (lib.kind != LibraryKind::torch_cpu) return {};  // libtorch_cuda: kernel host stubs are named from it on demand
  LibraryProbes found{operator_probes(img, patterns_)};
  if (found.probes.empty() && ctx.note_once)
    ctx.note_once(fmt::format("{}: no at::_ops::<op>::call symbol matched the operator list", lib.path));
  return found;
}

std::vector<Probe> TorchProbes::probes_beside(const MappedLibrary& lib, const ElfImage& img, const ProbeContext& ctx) {
  if (lib.kind != LibraryKind::cudart || !aggregate_ || !ctx.budgeted || !ctx.specs) return {};
  // Runtime calls only: the driver's synchronisation under a runtime one would count it twice.
  static const std::set<std::string> kBlocking{"cudaDeviceSynchronize", "cudaStreamSynchronize",
                                               "cudaEventSynchronize", "cudaMemcpy"};
  std::vector<Probe> probes;
  for (const CallSpec& spec : *ctx.specs) {
    if (!kBlocking.count(spec.name)) continue;
    for (auto& sym_name : spec.symbols)
      if (const ElfSymbol* sym = img.find(sym_name))
        if (auto off = img.vaddr_to_offset(sym->vaddr))
          probes.emplace_back(*off, SS_COOKIE_SYNC | SS_COOKIE_STEADY | SS_COOKIE_ENTRY_ONLY);
  }
  return probes;
}

int64_t TorchProbes::syncs_so_far() const {
  if (!skel_) return -1;
  const int fd = bpf_map__fd(skel_->maps.sync_totals);
  int64_t total = 0;
  uint32_t key = 0, next = 0;
  for (bool first = true; bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0; first = false) {
    key = next;
    uint64_t n = 0;
    if (bpf_map_lookup_elem(fd, &key, &n) == 0) total += static_cast<int64_t>(n);
  }
  return total;
}

TorchProbes::StepWindow TorchProbes::read_step_windows() const {
  StepWindow w;
  if (!skel_) return w;
  const int fd = bpf_map__fd(skel_->maps.step_windows);
  uint32_t key = 0, next = 0;
  for (bool first = true; bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0; first = false) {
    key = next;
    ss_step_window v{};
    if (bpf_map_lookup_elem(fd, &key, &v) != 0) continue;
    w.calls += v.calls;
    if (v.syncs) w.syncing_calls += v.calls;
    w.interval_calls += v.interval_calls;
    w.intervals += v.intervals;
  }
  return w;
}

void TorchProbes::clear_step_windows() {
  if (!skel_) return;
  const int fd = bpf_map__fd(skel_->maps.step_windows);
  for (uint32_t key; bpf_map_get_next_key(fd, nullptr, &key) == 0;)
    if (bpf_map_delete_elem(fd, &key) != 0) break;
}

std::vector<Probe> TorchProbes::operator_probes(const ElfImage& img, const std::vector<std::string>& patterns) {
  std::vector<std::pair<uint32_t, uint64_t>> ops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = ops_by_image_.find(img.path()); it != ops_by_image_.end()) ops = it->second;
  }
  if (ops.empty()) {
    // One pass over the symbol tables, read from the file: of libtorch_cpu's hundreds of thousands of names only
    // the operators' entry points are kept.
    std::vector<std::pair<std::string, uint64_t>> all;
    std::set<std::string> structs;
    img.for_each_function([&](std::string_view name, uint64_t vaddr) {
      if (name.size() < 16 || name[1] != 'Z') return;
      if (auto op = torch_ops_struct(name)) {
        structs.insert(*op);
        all.emplace_back(std::move(*op), vaddr);
      }
    });
    // Named as torch.profiler names them (sum_dim_IntList: aten::sum.dim_IntList), from the image's schemas.
    std::unordered_map<std::string, TorchOpName> op_names;
    if (!structs.empty())
      img.with_section(".rodata", [&](std::string_view rodata) { op_names = torch_op_names(rodata, structs); });
    std::set<uint64_t> seen;
    std::vector<std::pair<std::string, uint64_t>> found;
    for (auto& [op, vaddr] : all) {
      auto it = op_names.find(op);
      const TorchOpName* name = it == op_names.end() ? nullptr : &it->second;
      if (!matches_any(op, name, patterns) || !seen.insert(vaddr).second) continue;
      found.emplace_back(name ? "aten::" + name->name + (name->overload.empty() ? "" : "." + name->overload)
                              : torch_event_name(op),
                         vaddr);
    }
    // Ids in address order, whatever order the names were read in (the budget's subset windows probe the even ones).
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [event_name, vaddr] : found) {
      ops.emplace_back(static_cast<uint32_t>(names_.size()), vaddr);
      names_.push_back(event_name);
    }
    ops_by_image_[img.path()] = ops;
  }
  std::vector<Probe> probes;
  for (auto& [id, vaddr] : ops)
    if (auto off = img.vaddr_to_offset(vaddr)) probes.emplace_back(*off, id);
  return probes;
}

std::string TorchProbes::op_name(uint32_t op_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return op_id < names_.size() ? names_[op_id] : fmt::format("aten::op#{}", op_id);
}

// Torch operators counted in the kernel: running totals per operator, turned into counter series (calls, time)
// and the interval's median and 99th percentile from the log2 histogram (bucket midpoints).
void TorchProbes::sample_ops(TelemetrySink& sink, const std::string& host) {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0 || !skel_) return;
  const int fd = bpf_map__fd(skel_->maps.op_stats);
  std::vector<ss_op_stats> values(static_cast<size_t>(ncpu));
  std::vector<Sample> samples;
  const int64_t t = monotonic_ns();
  uint32_t key = 0, next = 0;
  bool first = true;
  while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
    first = false;
    key = next;
    if (bpf_map_lookup_elem(fd, &key, values.data()) != 0) continue;
    ss_op_stats sum{};
    for (auto& v : values) {
      sum.count += v.count;
      sum.total_ns += v.total_ns;
      for (int b = 0; b < SS_HIST_BUCKETS; ++b) sum.hist[b] += v.hist[b];
    }
    auto [it, added] = op_series_.try_emplace(key);
    OpSeries& os = it->second;
    if (sum.count == os.count) continue;
    if (added) {
      const std::string name = op_name(key);
      auto series = [&](const char* what, const char* unit, SeriesKind kind) {
        SeriesInfo info = series_info(fmt::format("torch.op.{}", what), name, Subsystem::software, unit, kind,
                                      kind == SeriesKind::counter ? SeriesCategory::event_counter
                                                                  : SeriesCategory::dynamic,
                                      "ebpf");
        info.host = host;
        return sink.add_series(info);
      };
      os.calls = series("calls", "count", SeriesKind::counter);
      os.time = series("time", "seconds", SeriesKind::counter);
      os.p50 = series("p50", "seconds", SeriesKind::gauge);
      os.p99 = series("p99", "seconds", SeriesKind::gauge);
    }
    const uint64_t n = sum.count - os.count;
    auto quantile = [&](double q) {
      uint64_t need = static_cast<uint64_t>(std::ceil(q * static_cast<double>(n))), seen = 0;
      for (int b = 0; b < SS_HIST_BUCKETS; ++b) {
        seen += sum.hist[b] - os.hist[static_cast<size_t>(b)];
        if (seen >= need) return 1.5 * std::ldexp(1.0, b) / 1e9;
      }
      return std::ldexp(1.0, SS_HIST_BUCKETS) / 1e9;
    };
    samples.push_back({os.calls, t, static_cast<double>(sum.count)});
    samples.push_back({os.time, t, static_cast<double>(sum.total_ns) / 1e9});
    samples.push_back({os.p50, t, quantile(0.5)});
    samples.push_back({os.p99, t, quantile(0.99)});
    os.count = sum.count;
    os.total_ns = sum.total_ns;
    for (int b = 0; b < SS_HIST_BUCKETS; ++b) os.hist[static_cast<size_t>(b)] = sum.hist[b];
  }
  if (!samples.empty()) sink.append_samples(samples);
}

uint64_t TorchProbes::calls_in_series() const {
  uint64_t all = 0;
  for (auto& [id, os] : op_series_) all += os.count;
  return all;
}

std::vector<uint32_t> TorchProbes::ops_counted() const {
  std::vector<uint32_t> ops;
  for (auto& [id, os] : op_series_)
    if (os.count) ops.push_back(id);
  return ops;
}

double TorchProbes::share_of_ops_divisible_by(uint32_t mod) const {
  uint64_t kept = 0, all = 0;
  for (auto& [id, os] : op_series_) {
    all += os.count;
    if (mod <= 1 || id % mod == 0) kept += os.count;
  }
  return all ? static_cast<double>(kept) / static_cast<double>(all) : 0;
}

}  // namespace stackscope::trace
