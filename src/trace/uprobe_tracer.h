// The eBPF uprobe tracer: loads one BPF skeleton per family (cuda, nccl, torch, python) plus proc (fork, exec,
// mmap, exit), finds the libraries in /proc/PID/maps, attaches per pid (or pid -1 for --all), follows new
// processes and late-loaded libraries, and turns ring-buffer records into Events.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "model/collector.h"
#include "trace/elf_symbols.h"
#include "trace/probe_catalog.h"
#include "trace/proc_maps.h"
#include "trace/record_decoder.h"
#include "trace/tracer.h"

struct bpf_link;
struct bpf_program;
struct ring_buffer;
struct cuda_bpf;
struct nccl_bpf;
struct torch_bpf;
struct python_bpf;
struct proc_bpf;
struct pystack_bpf;

namespace stackscope::trace {

class UprobeTracer final : public Collector {
 public:
  UprobeTracer(std::vector<Layer> layers, TracerOptions options);
  ~UprobeTracer() override;

  std::string name() const override { return "uprobe-tracer"; }
  Layer layer() const override { return layers_.empty() ? Layer::cuda : layers_.front(); }
  bool needs_root() const override { return true; }
  CollectorStatus start(TelemetrySink& sink, const CollectorOptions& options) override;
  void add_pid(uint32_t pid) override;
  void stop() override;
  // Detaches the probes (slow: one kernel RCU wait each) and unloads the programs.
  void release(const std::function<void(size_t done, size_t total)>& progress = {}) override;

  // True once probes of `layer` are attached for `pid` (or, with --all, anywhere). For tests and tools.
  bool wait_until_attached(uint32_t pid, Layer layer, std::chrono::milliseconds timeout);
  // Processes traced now (given, or followed through fork); exited ones are gone.
  std::vector<uint32_t> traced_pids() const;
  struct Stats {
    uint64_t events = 0, lost = 0, nested = 0, unmatched = 0;
    size_t links = 0;
  };
  Stats stats() const;

 private:
  struct RingCtx {
    UprobeTracer* self;
    Layer layer;
  };
  static int on_record(void* ctx, void* data, size_t size);
  void handle_record(Layer layer, const void* data, size_t size);
  void poll_loop();
  void maintain_loop();
  void rescan(uint32_t pid);
  void process_exited(uint32_t pid);
  void destroy_links(const std::vector<bpf_link*>& links, const std::function<void(size_t done, size_t total)>& progress);
  // Returns the bit of the layer it attached probes for (0: none).
  unsigned attach_library(int pid_filter, const MappedLibrary& lib, const std::shared_ptr<ElfImage>& img);
  bool attach_pair(int pid_filter, const MappedLibrary& lib, uint64_t offset, bpf_program* entry,
                   bpf_program* ret, uint64_t cookie);
  std::string kernel_name(uint32_t pid, uint64_t address);
  // Python stack sampling: registers the interpreter `lib` of `pid` with the sampler (its _PyRuntime address and
  // version's offsets). Returns the python layer bit when the process is sampled, 0 when this interpreter is
  // not for the sampler (mode, version) and the probe paths should handle it.
  unsigned register_python_stack(uint32_t pid, const std::vector<MapEntry>& maps, const MappedLibrary& lib);
  bool attach_pystack();  // perf events on every CPU and the scheduler tracepoints, at the first registration
  void note_once(const std::string& text);
  // Only the C-API fallback is duty-cycled: USDT probes cost nothing where the interpreter has them.
  bool duty_cycled() const {
    return topts_.python_mode == "capi" && topts_.python_duty_on_ms > 0 &&
           topts_.python_duty_period_ms > topts_.python_duty_on_ms;
  }
  void duty_loop();
  void set_watching(bool on);
  void report_counters(bool final_report);
  void report_program_runs();
  bool wants(Layer l) const;

  std::vector<Layer> layers_;
  TracerOptions topts_;
  CollectorOptions copts_;
  TelemetrySink* sink_ = nullptr;
  std::vector<CallSpec> specs_;

  cuda_bpf* cuda_ = nullptr;
  nccl_bpf* nccl_ = nullptr;
  torch_bpf* torch_ = nullptr;
  python_bpf* python_ = nullptr;
  proc_bpf* proc_ = nullptr;
  pystack_bpf* pystack_ = nullptr;
  std::vector<bpf_link*> pystack_links_;  // maintainer thread, then release()
  bool pystack_attached_ = false;
  ring_buffer* rb_ = nullptr;
  std::vector<std::unique_ptr<RingCtx>> ring_ctx_;

  std::thread poller_, maintainer_;
  std::atomic<bool> stopping_{false};
  bool started_ = false;

  ElfCache elf_cache_;
  mutable std::mutex mu_;  // everything below
  std::condition_variable cv_;
  std::set<uint32_t> pending_rescan_, pending_exit_;
  std::set<uint32_t> traced_;
  std::map<int, std::vector<bpf_link*>> links_;                        // by pid filter (-1: all)
  std::set<std::tuple<int, uint64_t, uint64_t, uint64_t, int>> attached_;  // pid, dev, inode, offset, family
  std::map<int, std::set<std::pair<uint64_t, uint64_t>>> known_libs_;  // pid filter -> (dev, inode) handled
  std::map<int, unsigned> attached_layers_;                            // pid filter -> bit per Layer
  std::vector<std::string> torch_names_;                               // op id -> event name
  std::map<std::string, std::vector<std::pair<uint32_t, uint64_t>>> torch_ops_by_image_;  // image -> (op id, vaddr)
  std::set<std::string> notes_sent_;
  std::set<uint32_t> py_sampled_;  // processes registered with the stack sampler
  // Duty-cycled python C-API probes: what to attach at each window (pid filter, library, (offset, cookie)).
  struct DutyTarget {
    int pid_filter;
    MappedLibrary lib;
    std::vector<std::pair<uint64_t, uint64_t>> probes;
  };
  std::vector<DutyTarget> duty_targets_;
  std::vector<bpf_link*> duty_links_;  // attached now (duty thread only, and release())
  std::vector<bpf_link*> exited_links_;  // of processes that exited while stopping: left to release()
  std::thread duty_;
  SeriesId watching_series_ = 0;
  bool watching_ = false;
  uint64_t duty_windows_ = 0;
  int64_t duty_attach_ns_ = 0, duty_detach_ns_ = 0;

  // Poller-only state.
  std::unique_ptr<RecordDecoder> decoder_;
  std::map<std::pair<uint32_t, uint64_t>, std::string> kernel_names_;  // (pid, host stub address) -> name
  std::atomic<uint64_t> events_{0};
  std::array<uint64_t, 6> lost_reported_{};  // per family, already sent to the sink
};

}  // namespace stackscope::trace
