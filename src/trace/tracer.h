// Non-instrumented tracing of CUDA, NCCL, PyTorch and CPython through eBPF uprobes/USDT: the factory the
// recorder uses. Needs root (CAP_BPF + CAP_PERFMON); start() says why when it cannot run.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/collector.h"
#include "model/layer.h"

namespace stackscope::trace {

struct TracerOptions {
  // Bytes of each family's BPF ring buffer (power of two, >= one page). A full buffer drops records, counted.
  uint32_t ringbuf_bytes = 8u << 20;
  // CPython: "stack" samples Python stacks from BPF (on CPU at python_sample_hz, and at every block of at least
  // python_offcpu_min_ns) for CPython 3.11 and 3.12; "usdt" times calls through function__entry/return (useful
  // before 3.11: 3.11 fires entries only under settrace, 3.12 builds often have none); "capi" times C-API entry
  // points (costly, few calls seen on 3.12); "auto" = "stack" for 3.11/3.12, else "usdt" where the interpreter
  // has the probes, else nothing; "off".
  std::string python_mode = "auto";
  int python_sample_hz = 99;
  uint64_t python_offcpu_min_ns = 200'000;
  // C-API entry points timed where there is no USDT (python3.12 from pip/uv builds has none).
  std::vector<std::string> python_capi_symbols = {"PyObject_Call", "_PyEval_EvalFrameDefault"};
  // Duty cycle of the C-API probes (python_mode "capi"): attached for python_duty_on_ms out of every
  // python_duty_period_ms, so the probes cost that fraction of their full price; 0 = always attached. The series
  // python.capi.watching (1 while attached, 0 otherwise) says which intervals were watched: call counts cover
  // only those, so rates must be divided by the watched fraction, not by the whole run.
  int python_duty_on_ms = 0;
  int python_duty_period_ms = 0;
  // Python calls shorter than this are not reported (cuts volume on call-heavy code).
  uint64_t python_min_duration_ns = 0;
  // false ("budgeted", the default): asynchronous CUDA calls are probed at entry only (no duration), torch
  // operators are counted in the kernel (series torch.op.*, not one event each), and probe families whose hits
  // would cost more than budget_pct of the job's CPU time are duty-cycled (trace.<family>.watching says when; the
  // torch family's counts are scaled as its end note says, estimated from the job's CPU time: model/sampled_count.h).
  // true ("full"): every call is a record with its duration and every probe stays attached: exact counts.
  bool full_detail = false;
  double budget_pct = 1.0;      // 0: no budget
  // A duty-cycled family is attached for a share of every period: this long at least, longer where its
  // attach/detach toggles cost the job more than a quarter of its share (up to budget_max_period_ms). Each toggle
  // rewrites the job's text pages, and its probes trap while links are attached and detached (a real H100 recording
  // at a 1 s period: attach 27-53 ms, detach 232-376 ms per window; docs/benchmarks/probe-cost.md).
  int budget_period_ms = 5000;
  // The longest period the toggles' price may lead to. Bounded: the incident engine's 1 s windows between watched
  // ones are filled from their neighbours, and a job shorter than a period is watched mostly at its start.
  int budget_max_period_ms = 20000;
  double hit_cost_ns = 0;       // price of one probe hit; 0: measured at start
  // Budgeted torch windows attach only the operators counted so far, every site each 8th window (probe_gates.cpp);
  // false: every site in every window (what sessions up to 13 did; for tests and comparisons).
  bool torch_hit_set = true;
  // false: one uprobe per probe even where the kernel has uprobe_multi (what kernels before 6.6 get; for tests
  // and comparisons).
  bool uprobe_multi = true;
  // Safety-net rescan of traced processes' maps (dlopen, missed events), milliseconds.
  int rescan_interval_ms = 1000;
  // Forward libbpf warnings to stderr.
  bool verbose = false;
};

// One collector for the requested layers among cuda, nccl, torch, python (others are ignored).
std::unique_ptr<Collector> make_uprobe_tracer(std::vector<Layer> layers, TracerOptions options = {});
// Whether a layer is served by the uprobe tracer.
bool is_traced_layer(Layer layer);

}  // namespace stackscope::trace
