#include "trace/uprobe_tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "cuda.skel.h"
#include "events.h"
#include "nccl.skel.h"
#include "proc.skel.h"
#include "pystack.skel.h"
#include "python.skel.h"
#include "torch.skel.h"
#include "model/clock.h"
#include "trace/python_offsets.h"
#include "trace/symbol_names.h"

namespace stackscope::trace {

namespace {

std::atomic<bool> g_libbpf_verbose{false};

int libbpf_print(enum libbpf_print_level level, const char* format, va_list args) {
  if (!g_libbpf_verbose || level == LIBBPF_DEBUG) return 0;
  return std::vfprintf(stderr, format, args);
}

// Family index for counters and attach bookkeeping.
enum Family { kCuda = 0, kNccl, kTorch, kPython, kProc, kPyStack };
const char* family_name(int f) {
  static const char* names[] = {"cuda", "nccl", "torch", "python", "proc", "python-stack"};
  return names[f];
}

void prepare_system() {
  rlimit r{RLIM_INFINITY, RLIM_INFINITY};
  setrlimit(RLIMIT_MEMLOCK, &r);  // kernels before 5.11 charge BPF maps to memlock
  struct stat st {};
  if (::stat("/sys/kernel/tracing/events", &st) != 0)
    ::mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr);  // tracepoints need tracefs
}

// Sum of one slot of a per-CPU counter array.
uint64_t read_counter(const bpf_map* map, uint32_t slot) {
  int ncpu = libbpf_num_possible_cpus();
  if (!map || ncpu <= 0) return 0;
  std::vector<uint64_t> values(static_cast<size_t>(ncpu));
  if (bpf_map_lookup_elem(bpf_map__fd(map), &slot, values.data()) != 0) return 0;
  uint64_t sum = 0;
  for (auto v : values) sum += v;
  return sum;
}

template <typename Skel>
int open_and_load(Skel*& skel, Skel* (*open)(), int (*load)(Skel*), void (*destroy)(Skel*), uint32_t rb_bytes,
                  std::string* err, const std::function<void(Skel*)>& configure = {}) {
  skel = open();
  if (!skel) {
    *err = std::string("open failed: ") + std::strerror(errno);
    return -1;
  }
  bpf_map__set_max_entries(skel->maps.events, rb_bytes);
  if (configure) configure(skel);
  int rc = load(skel);
  if (rc) {
    *err = std::string("load failed: ") + std::strerror(-rc);
    destroy(skel);
    skel = nullptr;
  }
  return rc;
}

}  // namespace

bool is_traced_layer(Layer layer) {
  return layer == Layer::cuda || layer == Layer::nccl || layer == Layer::torch || layer == Layer::python;
}

std::unique_ptr<Collector> make_uprobe_tracer(std::vector<Layer> layers, TracerOptions options) {
  return std::make_unique<UprobeTracer>(std::move(layers), std::move(options));
}

UprobeTracer::UprobeTracer(std::vector<Layer> layers, TracerOptions options) : topts_(std::move(options)) {
  for (auto l : layers)
    if (is_traced_layer(l) && !wants(l)) layers_.push_back(l);
  specs_ = builtin_call_specs();
  for (auto& s : topts_.python_capi_symbols) specs_.push_back(python_capi_spec(s));
}

UprobeTracer::~UprobeTracer() { release(); }

bool UprobeTracer::wants(Layer l) const {
  for (auto x : layers_)
    if (x == l) return true;
  return false;
}

CollectorStatus UprobeTracer::start(TelemetrySink& sink, const CollectorOptions& options) {
  if (started_) return {true, "already running"};
  if (layers_.empty()) return {false, "no traced layer requested (cuda, nccl, torch, python)"};
  if (::geteuid() != 0) return {false, "needs root (CAP_BPF and CAP_PERFMON) to load eBPF programs"};
  sink_ = &sink;
  copts_ = options;
  g_libbpf_verbose = topts_.verbose;
  libbpf_set_print(libbpf_print);
  prepare_system();

  std::string err;
  auto fail = [&](const std::string& what) {
    std::string msg = what + ": " + err;
    release();
    return CollectorStatus{false, msg};
  };
  uint32_t rb = topts_.ringbuf_bytes;
  if (wants(Layer::cuda) &&
      open_and_load<cuda_bpf>(cuda_, cuda_bpf__open, cuda_bpf__load, cuda_bpf__destroy, rb, &err))
    return fail("cuda BPF");
  if (wants(Layer::nccl) &&
      open_and_load<nccl_bpf>(nccl_, nccl_bpf__open, nccl_bpf__load, nccl_bpf__destroy, std::max(rb / 4, 65536u), &err))
    return fail("nccl BPF");
  if (wants(Layer::torch) &&
      open_and_load<torch_bpf>(torch_, torch_bpf__open, torch_bpf__load, torch_bpf__destroy, rb, &err))
    return fail("torch BPF");
  if (wants(Layer::python) && (topts_.python_mode == "stack" || topts_.python_mode == "auto") &&
      open_and_load<pystack_bpf>(pystack_, pystack_bpf__open, pystack_bpf__load, pystack_bpf__destroy, rb, &err,
                                 [&](pystack_bpf* s) { s->rodata->offcpu_min_ns = topts_.python_offcpu_min_ns; }))
    return fail("python stack BPF");
  if (wants(Layer::python) && topts_.python_mode != "off" && topts_.python_mode != "stack" &&
      open_and_load<python_bpf>(python_, python_bpf__open, python_bpf__load, python_bpf__destroy, rb, &err,
                                [&](python_bpf* s) { s->rodata->min_duration_ns = topts_.python_min_duration_ns; }))
    return fail("python BPF");
  if (open_and_load<proc_bpf>(proc_, proc_bpf__open, proc_bpf__load, proc_bpf__destroy, 256u << 10, &err,
                              [&](proc_bpf* s) {
                                s->rodata->all_processes = options.all_processes;
                                s->rodata->follow_children = options.follow_children;
                              }))
    return fail("proc BPF");
  // Lifecycle tracepoints; the mmap ones need syscall tracepoints (CONFIG_FTRACE_SYSCALLS): rescans cover them.
  struct {
    bpf_program* prog;
    bpf_link** link;
    bool required;
  } proc_progs[] = {{proc_->progs.on_fork, &proc_->links.on_fork, true},
                    {proc_->progs.on_exec, &proc_->links.on_exec, true},
                    {proc_->progs.on_exit, &proc_->links.on_exit, true},
                    {proc_->progs.on_mmap_enter, &proc_->links.on_mmap_enter, false},
                    {proc_->progs.on_mmap_exit, &proc_->links.on_mmap_exit, false}};
  for (auto& p : proc_progs) {
    *p.link = bpf_program__attach(p.prog);
    if (!*p.link) {
      err = std::string(bpf_program__name(p.prog)) + ": " + std::strerror(errno);
      if (p.required) return fail("process tracepoints");
      sink.add_note("trace", "no syscall tracepoints: dlopen is found by periodic rescans only (" + err + ")");
    }
  }

  auto add_ring = [&](bpf_map* map, Layer layer) -> bool {
    ring_ctx_.push_back(std::make_unique<RingCtx>(RingCtx{this, layer}));
    if (!rb_) {
      rb_ = ring_buffer__new(bpf_map__fd(map), on_record, ring_ctx_.back().get(), nullptr);
      return rb_ != nullptr;
    }
    return ring_buffer__add(rb_, bpf_map__fd(map), on_record, ring_ctx_.back().get()) == 0;
  };
  bool ok = add_ring(proc_->maps.events, Layer::host);
  if (cuda_) ok = ok && add_ring(cuda_->maps.events, Layer::cuda);
  if (nccl_) ok = ok && add_ring(nccl_->maps.events, Layer::nccl);
  if (torch_) ok = ok && add_ring(torch_->maps.events, Layer::torch);
  if (python_) ok = ok && add_ring(python_->maps.events, Layer::python);
  if (pystack_) ok = ok && add_ring(pystack_->maps.events, Layer::python);
  if (!ok) {
    err = std::strerror(errno);
    return fail("ring buffer");
  }

  decoder_ = std::make_unique<RecordDecoder>(specs_, [this](uint32_t pid, uint64_t a) { return kernel_name(pid, a); });
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto pid : options.pids) {
      traced_.insert(pid);
      pending_rescan_.insert(pid);
    }
  }
  uint8_t one = 1;
  for (auto pid : options.pids) bpf_map_update_elem(bpf_map__fd(proc_->maps.traced), &pid, &one, BPF_ANY);
  if (options.all_processes)
    for (auto pid : list_pids()) pending_rescan_.insert(pid);
  started_ = true;
  stopping_ = false;
  poller_ = std::thread([this] { poll_loop(); });
  maintainer_ = std::thread([this] { maintain_loop(); });
  if (python_ && duty_cycled()) {
    python_->data->capture_enabled = 0;
    SeriesInfo w;
    w.name = "python.capi.watching";
    w.subsystem = Subsystem::software;
    w.unit = "ratio";
    w.kind = SeriesKind::gauge;
    w.category = SeriesCategory::static_value;  // strictly periodic: says when calls were watched, not a signal
    w.host = options.host;
    w.source = "ebpf";
    watching_series_ = sink.add_series(w);
    sink.add_note("trace", fmt::format("python C-API probes duty-cycled: attached {} ms of every {} ms; calls are "
                                       "recorded only while python.capi.watching is 1, so divide counts by the "
                                       "watched time, not the run time", topts_.python_duty_on_ms,
                                       topts_.python_duty_period_ms));
    duty_ = std::thread([this] { duty_loop(); });
  }
  std::string layers;
  for (auto l : layers_) layers += (layers.empty() ? "" : ",") + std::string(layer_name(l));
  return {true, "tracing " + layers + (options.all_processes ? " in all processes" : "")};
}

void UprobeTracer::add_pid(uint32_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!copts_.all_processes) copts_.pids.push_back(pid);
  traced_.insert(pid);
  if (proc_) {
    uint8_t one = 1;
    bpf_map_update_elem(bpf_map__fd(proc_->maps.traced), &pid, &one, BPF_ANY);
  }
  pending_rescan_.insert(pid);
  cv_.notify_all();
}

void UprobeTracer::stop() {
  if (!started_) return;
  {  // under mu_: the maintainer and duty threads test stopping_ in cv_'s predicate, so no wakeup is lost
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (duty_.joinable()) duty_.join();
  if (watching_) set_watching(false);
  if (duty_windows_)
    sink_->add_note("trace", fmt::format("python duty cycle: {} window(s); attach {:.1f} ms, detach {:.1f} ms per "
                                         "window on average", duty_windows_, duty_attach_ns_ / 1e6 / duty_windows_,
                                         duty_detach_ns_ / 1e6 / duty_windows_));
  if (poller_.joinable()) poller_.join();
  if (maintainer_.joinable()) maintainer_.join();
  if (rb_) ring_buffer__consume(rb_);  // what is still buffered
  report_counters(true);
  report_program_runs();
  if (pystack_attached_) {  // the sampler's own cost, where kernel.bpf_stats_enabled was on
    std::string cost;
    for (bpf_program* prog : {pystack_->progs.on_cpu_sample, pystack_->progs.on_switch}) {
      bpf_prog_info info{};
      uint32_t len = sizeof info;
      if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) == 0 && info.run_cnt && info.run_time_ns)
        cost += fmt::format("{}{}: {} runs, {:.0f} ns/run", cost.empty() ? "" : "; ", bpf_program__name(prog),
                            info.run_cnt, static_cast<double>(info.run_time_ns) / static_cast<double>(info.run_cnt));
    }
    if (!cost.empty()) sink_->add_note("trace", "python stack sampler BPF cost (kernel.bpf_stats_enabled): " + cost);
  }
  started_ = false;
}

void UprobeTracer::release(const std::function<void(size_t done, size_t total)>& progress) {
  stop();
  std::vector<bpf_link*> links;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [pid, v] : links_) links.insert(links.end(), v.begin(), v.end());
    links_.clear();
    links.insert(links.end(), duty_links_.begin(), duty_links_.end());
    duty_links_.clear();
    links.insert(links.end(), exited_links_.begin(), exited_links_.end());
    exited_links_.clear();
    attached_.clear();
  }
  links.insert(links.end(), pystack_links_.begin(), pystack_links_.end());
  pystack_links_.clear();
  pystack_attached_ = false;
  destroy_links(links, progress);
  if (rb_) ring_buffer__free(rb_);
  rb_ = nullptr;
  ring_ctx_.clear();
  if (cuda_) cuda_bpf__destroy(cuda_);
  if (nccl_) nccl_bpf__destroy(nccl_);
  if (torch_) torch_bpf__destroy(torch_);
  if (python_) python_bpf__destroy(python_);
  if (proc_) proc_bpf__destroy(proc_);
  if (pystack_) pystack_bpf__destroy(pystack_);
  pystack_ = nullptr;
  cuda_ = nullptr;
  nccl_ = nullptr;
  torch_ = nullptr;
  python_ = nullptr;
  proc_ = nullptr;
}

// Serial on purpose: the kernel serialises uprobe detach (~100 ms each here); 8 or 32 threads took as long as one
// (354 torch-layer links: 34-44 s either way, docs/BENCHMARKS.md).
void UprobeTracer::destroy_links(const std::vector<bpf_link*>& links,
                                 const std::function<void(size_t done, size_t total)>& progress) {
  for (size_t i = 0; i < links.size(); ++i) {
    if (progress) progress(i, links.size());
    bpf_link__destroy(links[i]);
  }
  if (progress && !links.empty()) progress(links.size(), links.size());
}

int UprobeTracer::on_record(void* ctx, void* data, size_t size) {
  auto* c = static_cast<RingCtx*>(ctx);
  c->self->handle_record(c->layer, data, size);
  return 0;
}

void UprobeTracer::handle_record(Layer, const void* data, size_t size) {
  if (size < sizeof(uint32_t)) return;
  uint32_t kind;
  std::memcpy(&kind, data, sizeof kind);
  switch (kind) {
    case SS_REC_CALL:
      if (size >= sizeof(ss_call_record))
        if (auto e = decoder_->decode_call(*static_cast<const ss_call_record*>(data))) {
          sink_->append_event(std::move(*e));
          ++events_;
        }
      break;
    case SS_REC_TORCH:
      if (size >= sizeof(ss_torch_record)) {
        auto& r = *static_cast<const ss_torch_record*>(data);
        std::string name;
        {
          std::lock_guard<std::mutex> lock(mu_);
          name = r.op_id < torch_names_.size() ? torch_names_[r.op_id] : fmt::format("aten::op#{}", r.op_id);
        }
        sink_->append_event(decoder_->decode_torch(r, std::move(name)));
        ++events_;
      }
      break;
    case SS_REC_PYTHON:
      if (size >= sizeof(ss_python_record)) {
        sink_->append_event(decoder_->decode_python(*static_cast<const ss_python_record*>(data)));
        ++events_;
      }
      break;
    case SS_REC_PYCODE:
      if (size >= sizeof(ss_pycode_record)) decoder_->note_pycode(*static_cast<const ss_pycode_record*>(data));
      break;
    case SS_REC_PYSTACK:
      if (size >= sizeof(ss_pystack_record)) {
        sink_->append_event(decoder_->decode_pystack(*static_cast<const ss_pystack_record*>(data)));
        ++events_;
      }
      break;
    case SS_REC_PROC:
      if (size >= sizeof(ss_proc_record)) {
        auto& r = *static_cast<const ss_proc_record*>(data);
        std::lock_guard<std::mutex> lock(mu_);
        if (r.event == SS_PROC_EXEC) py_sampled_.erase(r.pid);  // a new image: its interpreter is found again
        if (r.event == SS_PROC_EXIT) {
          pending_exit_.insert(r.pid);
        } else if (r.event == SS_PROC_FORK && copts_.all_processes) {
          // --all: probes are per file, so a child that maps nothing new needs no work.
        } else {
          if (r.event == SS_PROC_FORK) traced_.insert(r.pid);
          pending_rescan_.insert(r.pid);
        }
        cv_.notify_all();
      }
      break;
    default:
      break;
  }
}

void UprobeTracer::poll_loop() {
  while (!stopping_) {
    int n = ring_buffer__poll(rb_, 100);
    if (n < 0 && n != -EINTR) break;
    if (pystack_) ring_buffer__consume(rb_);  // the stack sampler's records wake nobody (bpf/pystack.bpf.c)
  }
}

void UprobeTracer::maintain_loop() {
  auto next_periodic = std::chrono::steady_clock::now();
  while (!stopping_) {
    std::set<uint32_t> rescans, exits;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, next_periodic, [&] { return stopping_ || !pending_rescan_.empty() || !pending_exit_.empty(); });
      if (stopping_) break;
      if (std::chrono::steady_clock::now() >= next_periodic) {
        // Safety net for lost proc records and libraries mapped without a traced mmap (dlopen).
        if (copts_.all_processes) {
          for (auto pid : list_pids()) pending_rescan_.insert(pid);
        } else {
          pending_rescan_.insert(traced_.begin(), traced_.end());
        }
        next_periodic = std::chrono::steady_clock::now() + std::chrono::milliseconds(topts_.rescan_interval_ms);
      }
      rescans.swap(pending_rescan_);
      exits.swap(pending_exit_);
    }
    for (auto pid : exits) process_exited(pid);
    for (auto pid : rescans) {
      if (stopping_) break;
      rescan(pid);
    }
    report_counters(false);
  }
}

void UprobeTracer::process_exited(uint32_t pid) {
  std::vector<bpf_link*> links;
  {
    std::lock_guard<std::mutex> lock(mu_);
    traced_.erase(pid);
    // Whether or not user space registered it: the kernel registers a forked child itself (pystack on_fork), and
    // a child that exits before its rescan would stay registered for the next process given its pid.
    py_sampled_.erase(pid);
    if (pystack_) bpf_map_delete_elem(bpf_map__fd(pystack_->maps.py_procs), &pid);
    if (copts_.all_processes) return;
    if (auto it = links_.find(static_cast<int>(pid)); it != links_.end()) {
      links.swap(it->second);
      links_.erase(it);
    }
    for (auto it = attached_.begin(); it != attached_.end();)
      it = std::get<0>(*it) == static_cast<int>(pid) ? attached_.erase(it) : std::next(it);
    known_libs_.erase(static_cast<int>(pid));
    attached_layers_.erase(static_cast<int>(pid));
    std::erase_if(duty_targets_, [&](const DutyTarget& t) { return t.pid_filter == static_cast<int>(pid); });
  }
  // A dead process's probes are freed here, one RCU wait each, unless the recording is ending: then release()
  // frees them after the recording is closed (the traced command exiting is what usually ends it).
  for (size_t i = 0; i < links.size(); ++i) {
    if (stopping_) {
      std::lock_guard<std::mutex> lock(mu_);
      exited_links_.insert(exited_links_.end(), links.begin() + static_cast<ptrdiff_t>(i), links.end());
      break;
    }
    bpf_link__destroy(links[i]);
  }
}

void UprobeTracer::rescan(uint32_t pid) {
  int filter = copts_.all_processes ? -1 : static_cast<int>(pid);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!copts_.all_processes && !traced_.count(pid)) return;
  }
  auto maps = read_proc_maps(pid);
  if (maps.empty()) return;  // gone (its exit record follows) or a kernel thread
  unsigned layers = 0;
  for (auto& lib : find_libraries(pid, maps)) {
    if (lib.kind == LibraryKind::python && pystack_) {
      // Sampled per process (the interpreter's address differs in each); probes are not attached for it then.
      if (unsigned bit = register_python_stack(pid, maps, lib)) {
        layers |= bit;
        continue;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!known_libs_[filter].insert({lib.dev, lib.inode}).second) continue;
    }
    std::shared_ptr<ElfImage> img;
    try {
      img = elf_cache_.get(lib.host_path);
    } catch (const std::exception& e) {
      sink_->add_note("trace", fmt::format("pid {}: {}", pid, e.what()));
      continue;
    }
    layers |= attach_library(filter, lib, img);
  }
  // Published once the whole scan is done: a waiter sees every library of the layer attached, not the first.
  if (layers) {
    std::lock_guard<std::mutex> lock(mu_);
    attached_layers_[filter] |= layers;
    cv_.notify_all();
  }
}

bool UprobeTracer::attach_pair(int pid_filter, const MappedLibrary& lib, uint64_t offset, bpf_program* entry,
                               bpf_program* ret, uint64_t cookie) {
  int family = entry == (cuda_ ? cuda_->progs.call_entry : nullptr)       ? kCuda
               : entry == (nccl_ ? nccl_->progs.call_entry : nullptr)     ? kNccl
               : entry == (torch_ ? torch_->progs.op_entry : nullptr)     ? kTorch
                                                                          : kPython;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!attached_.insert({pid_filter, lib.dev, lib.inode, offset, family}).second) return true;  // alias
  }
  LIBBPF_OPTS(bpf_uprobe_opts, eo, .bpf_cookie = cookie, .retprobe = false);
  LIBBPF_OPTS(bpf_uprobe_opts, ro, .bpf_cookie = cookie, .retprobe = true);
  // Return probe first, as in duty_loop(): a call entered between the two attachments then has a return without
  // an entry (counted, ignored) rather than an entry that no return ever closes.
  bpf_link* r = bpf_program__attach_uprobe_opts(ret, pid_filter, lib.host_path.c_str(), offset, &ro);
  if (!r) return false;
  bpf_link* e = bpf_program__attach_uprobe_opts(entry, pid_filter, lib.host_path.c_str(), offset, &eo);
  if (!e) {
    bpf_link__destroy(r);
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto& v = links_[pid_filter];
  v.push_back(e);
  v.push_back(r);
  return true;
}

unsigned UprobeTracer::attach_library(int pid_filter, const MappedLibrary& lib,
                                      const std::shared_ptr<ElfImage>& img) {
  int failures = 0, attached = 0;
  auto attach_specs = [&](Layer layer, bpf_program* entry, bpf_program* ret) {
    for (uint32_t id = 0; id < specs_.size(); ++id) {
      auto& spec = specs_[id];
      if (spec.layer != layer || std::find(spec.libs.begin(), spec.libs.end(), lib.kind) == spec.libs.end()) continue;
      for (auto& sym_name : spec.symbols) {
        const ElfSymbol* sym = img->find(sym_name);
        if (!sym) continue;
        auto off = img->vaddr_to_offset(sym->vaddr);
        if (!off) continue;
        if (attach_pair(pid_filter, lib, *off, entry, ret, call_cookie(spec, id)))
          ++attached;
        else
          ++failures;
      }
    }
  };
  Layer layer = Layer::cuda;
  switch (lib.kind) {
    case LibraryKind::cudart:
    case LibraryKind::cuda_driver:
      if (!cuda_) return 0;
      attach_specs(Layer::cuda, cuda_->progs.call_entry, cuda_->progs.call_return);
      break;
    case LibraryKind::nccl:
      if (!nccl_) return 0;
      layer = Layer::nccl;
      attach_specs(Layer::nccl, nccl_->progs.call_entry, nccl_->progs.call_return);
      break;
    case LibraryKind::torch_cpu: {
      if (!torch_) return 0;
      layer = Layer::torch;
      std::vector<std::pair<uint32_t, uint64_t>> ops;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (auto it = torch_ops_by_image_.find(img->path()); it != torch_ops_by_image_.end()) ops = it->second;
      }
      if (ops.empty()) {
        auto patterns = copts_.torch_ops.empty() ? default_torch_ops() : copts_.torch_ops;
        std::set<uint64_t> seen;
        std::vector<std::pair<std::string, uint64_t>> found;
        for (auto& [name, vaddr] : img->all_names()) {
          if (name.size() < 16 || name[1] != 'Z') continue;
          auto op = torch_ops_struct(name);
          if (!op || !matches_any(*op, patterns) || !seen.insert(vaddr).second) continue;
          found.emplace_back(*op, vaddr);
        }
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& [op, vaddr] : found) {
          ops.emplace_back(static_cast<uint32_t>(torch_names_.size()), vaddr);
          torch_names_.push_back(torch_event_name(op));
        }
        torch_ops_by_image_[img->path()] = ops;
      }
      for (auto& [id, vaddr] : ops) {
        auto off = img->vaddr_to_offset(vaddr);
        if (off && attach_pair(pid_filter, lib, *off, torch_->progs.op_entry, torch_->progs.op_return, id))
          ++attached;
        else
          ++failures;
      }
      if (ops.empty()) note_once(fmt::format("{}: no at::_ops::<op>::call symbol matched the operator list", lib.path));
      break;
    }
    case LibraryKind::torch_cuda:
      return 0;  // kernel host stubs are named from it on demand; operators enter through libtorch_cpu
    case LibraryKind::python: {
      if (!python_) return 0;  // off, or stack mode (register_python_stack)
      layer = Layer::python;
      if (!img->find("Py_Initialize") && !img->find("_PyEval_EvalFrameDefault")) return 0;  // not an interpreter
      bool usdt = img->has_usdt("python", "function__entry") && img->has_usdt("python", "function__return");
      // Without USDT, timing C-API entry points hits a uprobe on nearly every Python call: measured at 4-14%
      // of a GPT-2 step on the GPU machine (docs/BENCHMARKS.md), so "auto" leaves it off and says how to opt in.
      if ((topts_.python_mode == "usdt" || topts_.python_mode == "auto") && !usdt) {
        // Under auto, stack sampling was tried first and said why it could not register (its own note).
        note_once(lib.path + ": no python:function__entry USDT probes" +
                  (topts_.python_mode == "auto" ? std::string(" and no stack sampling (see above)") : std::string()) +
                  "; python layer not traced there (--python-mode stack for CPython 3.11/3.12, or --python-mode "
                  "capi to time C-API calls, at several % of step time)");
        return 0;
      }
      if (usdt && topts_.python_mode != "capi") {
        std::lock_guard<std::mutex> lock(mu_);
        if (attached_.insert({pid_filter, lib.dev, lib.inode, 0, kPython}).second) {
          bpf_link* e = bpf_program__attach_usdt(python_->progs.py_entry, pid_filter, lib.host_path.c_str(), "python",
                                                 "function__entry", nullptr);
          bpf_link* r = e ? bpf_program__attach_usdt(python_->progs.py_return, pid_filter, lib.host_path.c_str(),
                                                     "python", "function__return", nullptr)
                          : nullptr;
          if (e && r) {
            links_[pid_filter].push_back(e);
            links_[pid_filter].push_back(r);
            ++attached;
          } else {
            if (e) bpf_link__destroy(e);
            attached_.erase({pid_filter, lib.dev, lib.inode, 0, kPython});
            ++failures;
          }
        }
      } else if (duty_cycled()) {
        // Attached by duty_loop() at each watched window.
        DutyTarget target{pid_filter, lib, {}};
        for (uint32_t id = 0; id < specs_.size(); ++id) {
          auto& spec = specs_[id];
          if (spec.layer != Layer::python) continue;
          for (auto& sym_name : spec.symbols)
            if (const ElfSymbol* sym = img->find(sym_name))
              if (auto off = img->vaddr_to_offset(sym->vaddr)) target.probes.emplace_back(*off, call_cookie(spec, id));
        }
        if (!target.probes.empty()) {
          std::lock_guard<std::mutex> lock(mu_);
          duty_targets_.push_back(std::move(target));
          ++attached;
        }
      } else {
        note_once(lib.path + ": no function-level USDT probes; timing C-API entry points instead");
        attach_specs(Layer::python, python_->progs.call_entry, python_->progs.call_return);
      }
      break;
    }
    default:
      return 0;
  }
  if (failures)
    note_once(fmt::format("{}: {} probe(s) failed to attach (pid filter {}): {}", lib.path, failures, pid_filter,
                          std::strerror(errno)));
  return attached ? 1u << static_cast<unsigned>(layer) : 0u;
}

void UprobeTracer::note_once(const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!notes_sent_.insert(text).second) return;
  }
  sink_->add_note("trace", text);
}

unsigned UprobeTracer::register_python_stack(uint32_t pid, const std::vector<MapEntry>& maps,
                                             const MappedLibrary& lib) {
  const unsigned bit = 1u << static_cast<unsigned>(Layer::python);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (py_sampled_.count(pid)) return bit;
  }
  std::shared_ptr<ElfImage> img;
  try {
    img = elf_cache_.get(lib.host_path);
  } catch (const std::exception&) {
    return 0;  // the probe path says why
  }
  if (!img->find("Py_Initialize") && !img->find("_PyEval_EvalFrameDefault")) return 0;  // not an interpreter
  const auto version = python_version(*img);
  const ss_py_offsets* offsets = version ? python_offsets(*version) : nullptr;
  const std::string vtext = version ? fmt::format("{}.{}", version->major, version->minor) : "of unknown version";
  if (!offsets) {  // auto: USDT where it has the probes
    if (topts_.python_mode == "stack")
      note_once(fmt::format("{}: CPython {} has no stack offsets in stackscope (3.11, 3.12): not sampled", lib.path,
                            vtext));
    return 0;
  }
  const auto runtime_vaddr = img->find_object("_PyRuntime");
  // The file's lowest mapping gives the load bias: address = vaddr - vaddr(mapping offset) + mapping start.
  const MapEntry* first = nullptr;
  for (auto& m : maps)
    if (m.inode == lib.inode && m.dev == lib.dev && (!first || m.offset < first->offset)) first = &m;
  const auto first_vaddr = first ? img->offset_to_vaddr(first->offset) : std::nullopt;
  if (!runtime_vaddr || !first_vaddr) {
    note_once(lib.path + ": no _PyRuntime symbol (or mapping) to find the interpreter from: not sampled");
    return 0;
  }
  ss_py_proc proc{};
  proc.runtime = *runtime_vaddr - *first_vaddr + first->start;
  proc.off = *offsets;
  if (!attach_pystack()) return 0;
  if (bpf_map_update_elem(bpf_map__fd(pystack_->maps.py_procs), &pid, &proc, BPF_ANY) != 0) {
    note_once(fmt::format("python stack sampler: cannot register pid {}: {}", pid, std::strerror(errno)));
    return 0;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    py_sampled_.insert(pid);
  }
  note_once(fmt::format("{}: CPython {}: Python stacks sampled on CPU at {} Hz and at every block of >= {} us "
                        "(--python-mode stack)",
                        lib.path, vtext, topts_.python_sample_hz, topts_.python_offcpu_min_ns / 1000));
  return bit;
}

bool UprobeTracer::attach_pystack() {
  if (pystack_attached_) return true;
  for (bpf_program* prog : {pystack_->progs.on_switch, pystack_->progs.on_fork, pystack_->progs.on_exec}) {
    bpf_link* l = bpf_program__attach(prog);
    if (!l) {
      note_once(fmt::format("python stack sampler: {}: {}: not sampled", bpf_program__name(prog), std::strerror(errno)));
      // Detach what was attached: the next Python process tries again, and must not attach it a second time.
      for (bpf_link* attached : pystack_links_) bpf_link__destroy(attached);
      pystack_links_.clear();
      return false;
    }
    pystack_links_.push_back(l);
  }
  // A CPU-clock sampler on every CPU (a software event: works without a PMU, in VMs); the BPF program keeps only
  // registered Python processes. Offline CPUs refuse it.
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.sample_period = 1'000'000'000ull / static_cast<uint64_t>(std::max(1, topts_.python_sample_hz));  // ns
  size_t cpus = 0;
  for (int cpu = 0; cpu < libbpf_num_possible_cpus(); ++cpu) {
    int fd = static_cast<int>(::syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) continue;
    bpf_link* l = bpf_program__attach_perf_event(pystack_->progs.on_cpu_sample, fd);
    if (!l) {
      ::close(fd);
      continue;
    }
    pystack_links_.push_back(l);  // destroying the link closes the event
    ++cpus;
  }
  if (cpus == 0) note_once(std::string("python stack sampler: no CPU-clock perf event (") + std::strerror(errno) +
                           "): blocked time only");
  pystack_attached_ = true;
  return true;
}

// The watched interval must contain every reported call's start: its opening time is read before capture is
// enabled, and its closing time after capture is disabled (a call that saw the flag set started in between).
void UprobeTracer::set_watching(bool on) {
  int64_t t = 0;
  if (on) t = monotonic_ns();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  python_->data->capture_enabled = on ? 1 : 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!on) t = monotonic_ns();
  watching_ = on;
  Sample s{watching_series_, t, on ? 1.0 : 0.0};
  sink_->append_samples({&s, 1});
}

// Attaches the python C-API probes for python_duty_on_ms of every python_duty_period_ms. Calls are reported
// only between set_watching(true), once all are attached, and set_watching(false), before any is detached.
void UprobeTracer::duty_loop() {
  using clock = std::chrono::steady_clock;
  const auto on = std::chrono::milliseconds(topts_.python_duty_on_ms);
  const auto period = std::chrono::milliseconds(topts_.python_duty_period_ms);
  auto next_on = clock::now();
  while (!stopping_) {
    std::vector<DutyTarget> targets;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, next_on, [&] { return stopping_.load(); });
      if (stopping_) break;
      targets = duty_targets_;
    }
    if (targets.empty()) {  // no interpreter found yet: look again soon
      next_on = clock::now() + std::chrono::milliseconds(100);
      continue;
    }
    int64_t t0 = monotonic_ns();
    // Calls in flight at the last detach never returned through a probe: forget every thread's call stack.
    int fd = bpf_map__fd(python_->maps.call_threads);
    for (uint32_t tid; bpf_map_get_next_key(fd, nullptr, &tid) == 0;)
      if (bpf_map_delete_elem(fd, &tid) != 0) break;
    for (auto& t : targets)
      for (auto& [offset, cookie] : t.probes) {
        LIBBPF_OPTS(bpf_uprobe_opts, eo, .bpf_cookie = cookie, .retprobe = false);
        LIBBPF_OPTS(bpf_uprobe_opts, ro, .bpf_cookie = cookie, .retprobe = true);
        // Return probe first: an entry probe alone pushes a frame per call that nothing pops, and a thread deeper
        // than the frames kept reports nothing for the rest of the window. (Detached in this order too: entry first.)
        for (auto [prog, opts] : {std::pair{python_->progs.call_return, &ro}, std::pair{python_->progs.call_entry, &eo}})
          if (bpf_link* l = bpf_program__attach_uprobe_opts(prog, t.pid_filter, t.lib.host_path.c_str(), offset, opts)) {
            std::lock_guard<std::mutex> lock(mu_);
            duty_links_.push_back(l);
          }
      }
    int64_t t1 = monotonic_ns();
    for (uint32_t tid; bpf_map_get_next_key(fd, nullptr, &tid) == 0;)  // frames pushed while attaching
      if (bpf_map_delete_elem(fd, &tid) != 0) break;
    set_watching(true);
    auto window_end = clock::now() + on;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, window_end, [&] { return stopping_.load(); });
    }
    set_watching(false);
    if (stopping_) break;  // release() detaches them, after the recording is closed
    std::vector<bpf_link*> links;
    {
      std::lock_guard<std::mutex> lock(mu_);
      links.swap(duty_links_);
    }
    std::reverse(links.begin(), links.end());  // entries before returns (see above)
    int64_t t2 = monotonic_ns();
    destroy_links(links, {});
    duty_attach_ns_ += t1 - t0;
    duty_detach_ns_ += monotonic_ns() - t2;
    ++duty_windows_;
    next_on += period;
    if (next_on < clock::now()) next_on = clock::now() + (period - on);  // detaching overran the period
  }
}

bool UprobeTracer::wait_until_attached(uint32_t pid, Layer layer, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  unsigned bit = 1u << static_cast<unsigned>(layer);
  return cv_.wait_for(lock, timeout, [&] {
    auto it = attached_layers_.find(copts_.all_processes ? -1 : static_cast<int>(pid));
    return it != attached_layers_.end() && (it->second & bit);
  });
}

std::vector<uint32_t> UprobeTracer::traced_pids() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {traced_.begin(), traced_.end()};
}

UprobeTracer::Stats UprobeTracer::stats() const {
  Stats s;
  s.events = events_;
  const bpf_map* maps[] = {cuda_ ? cuda_->maps.counters : nullptr, nccl_ ? nccl_->maps.counters : nullptr,
                           torch_ ? torch_->maps.counters : nullptr, python_ ? python_->maps.counters : nullptr,
                           proc_ ? proc_->maps.counters : nullptr, pystack_ ? pystack_->maps.counters : nullptr};
  for (auto* m : maps) {
    s.lost += read_counter(m, SS_CNT_RB_FULL);
    s.nested += read_counter(m, SS_CNT_NESTED);
    s.unmatched += read_counter(m, SS_CNT_UNMATCHED);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [pid, v] : links_) s.links += v.size();
  return s;
}

void UprobeTracer::report_counters(bool final_report) {
  const bpf_map* maps[] = {cuda_ ? cuda_->maps.counters : nullptr, nccl_ ? nccl_->maps.counters : nullptr,
                           torch_ ? torch_->maps.counters : nullptr, python_ ? python_->maps.counters : nullptr,
                           proc_ ? proc_->maps.counters : nullptr, pystack_ ? pystack_->maps.counters : nullptr};
  for (int f = 0; f < static_cast<int>(std::size(maps)); ++f) {
    if (!maps[f]) continue;
    uint64_t lost = read_counter(maps[f], SS_CNT_RB_FULL);
    if (lost > lost_reported_[f]) {
      sink_->add_drops(std::string("bpf-") + family_name(f), lost - lost_reported_[f]);
      lost_reported_[f] = lost;
    }
    if (final_report) {
      uint64_t nested = read_counter(maps[f], SS_CNT_NESTED), unmatched = read_counter(maps[f], SS_CNT_UNMATCHED);
      if (nested)
        sink_->add_note("trace", fmt::format("{}: {} driver call(s) folded into the runtime call above them",
                                             family_name(f), nested));
      if (unmatched)
        sink_->add_note("trace", fmt::format("{}: {} return(s) without a matching entry (the call began before its "
                                             "entry probe was attached)", family_name(f), unmatched));
      if (uint64_t deep = read_counter(maps[f], SS_CNT_DEEP))
        sink_->add_note("trace", fmt::format("{}: {} call(s) nested deeper than the calls kept per thread: not "
                                             "reported", family_name(f), deep));
      if (uint64_t no_return = read_counter(maps[f], SS_CNT_NO_RETURN))
        sink_->add_note("trace", fmt::format("{}: {} call(s) not reported: the kernel gave them no return probe (at "
                                             "most 64 may be pending per thread, all probes together; deep Python "
                                             "recursion under --python-mode capi reaches it)", family_name(f),
                                             no_return));
      if (uint64_t stale = read_counter(maps[f], SS_CNT_STALE))
        sink_->add_note("trace", fmt::format("{}: {} call(s) whose return never came (a longjmp or exception "
                                             "skipped it) dropped", family_name(f), stale));
      if (uint64_t unread = read_counter(maps[f], SS_CNT_PY_UNREAD))
        sink_->add_note("trace", fmt::format("{}: {} stack(s) of Python threads could not be read (page not "
                                             "resident, or the interpreter between states)", family_name(f), unread));
    }
  }
}

// Runs of each program that the kernel skipped because another BPF program was running on that CPU (its
// per-CPU recursion guards): a skipped entry or return program loses that call. Where kernel.bpf_stats_enabled
// is on, also how often the probe programs ran: entries against returns.
void UprobeTracer::report_program_runs() {
  const bpf_object* objs[] = {cuda_ ? cuda_->obj : nullptr,   nccl_ ? nccl_->obj : nullptr,
                              torch_ ? torch_->obj : nullptr, python_ ? python_->obj : nullptr,
                              proc_ ? proc_->obj : nullptr,   pystack_ ? pystack_->obj : nullptr};
  std::string misses, runs;
  for (int f = 0; f < static_cast<int>(std::size(objs)); ++f) {
    if (!objs[f]) continue;
    bpf_program* prog = nullptr;
    bpf_object__for_each_program(prog, objs[f]) {
      bpf_prog_info info{};
      uint32_t len = sizeof info;
      if (bpf_program__fd(prog) < 0 || bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) != 0) continue;
      if (info.recursion_misses)
        misses += fmt::format("{}{}/{}: {}", misses.empty() ? "" : ", ", family_name(f), bpf_program__name(prog),
                              info.recursion_misses);
      if (info.run_cnt && f <= kPython)
        runs += fmt::format("{}{}/{}: {}", runs.empty() ? "" : ", ", family_name(f), bpf_program__name(prog),
                            info.run_cnt);
    }
  }
  if (!misses.empty())
    sink_->add_note("trace", "BPF program runs the kernel skipped (another BPF program was running on the CPU): " +
                                 misses);
  if (!runs.empty()) sink_->add_note("trace", "probe program runs (kernel.bpf_stats_enabled): " + runs);
}

std::string UprobeTracer::kernel_name(uint32_t pid, uint64_t address) {
  auto key = std::make_pair(pid, address);
  if (auto it = kernel_names_.find(key); it != kernel_names_.end()) return it->second;
  std::string name;
  const auto maps = read_proc_maps(pid);
  for (auto& m : maps) {
    if (address < m.start || address >= m.end || m.path.empty() || m.path[0] != '/') continue;
    uint64_t file_off = address - m.start + m.offset;
    try {
      auto img = elf_cache_.get("/proc/" + std::to_string(pid) + "/root" + m.path);
      auto vaddr = img->offset_to_vaddr(file_off);
      const ElfSymbol* sym = vaddr ? img->symbol_at(*vaddr) : nullptr;
      if (sym) name = demangle(sym->name);
    } catch (const std::exception&) {
    }
    if (name.empty()) {  // stripped: module and offset still tell kernels apart
      auto slash = m.path.rfind('/');
      name = fmt::format("{}+0x{:x}", m.path.substr(slash + 1), file_off);
    }
    break;
  }
  // Cached also when nothing names it (a driver launch's CUfunction is a heap handle, in no file): rereading a
  // large process's maps for every such launch capped the consumer at a few thousand events/s and overflowed the
  // ring buffer. Not cached when the process is gone (no maps): "" -> hex.
  if (!maps.empty()) kernel_names_.emplace(key, name);
  return name;
}

}  // namespace stackscope::trace
