// One probe family: the BPF skeleton of one bpf/<family>.bpf.c, loaded, and the maps that the tracer reads and
// writes for every family alike (ring buffer, counters, capture flag, per-thread call stacks). Each family is a
// <family>_probes.{h,cpp} pair beside its program; UprobeTracer (uprobe_tracer.h) owns them.
#pragma once
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "model/layer.h"
#include "trace/elf_symbols.h"
#include "trace/probe_catalog.h"
#include "trace/proc_maps.h"

namespace stackscope::trace {

// The programs a uprobe family attaches per library: single-probe and uprobe_multi variants.
struct FamilyProgs {
  bpf_program *entry = nullptr, *ret = nullptr, *entry_multi = nullptr, *ret_multi = nullptr;
};

// One uprobe: the file offset in the library and the BPF cookie (call id and SS_COOKIE_* flags, or operator id).
using Probe = std::pair<uint64_t, uint64_t>;

// What the tracer tells a uprobe family when it asks for a library's probes.
struct ProbeContext {
  const std::vector<CallSpec>* specs = nullptr;  // the call catalog (ids are indexes into it)
  bool full_detail = false;                      // --detail full: a record per call, no duty cycle
  bool budgeted = false;                         // the cost budget duty-cycles hot families
  std::function<void(const std::string&)> note_once;  // a note sent once per recording
};

// A family's probes in one library. The tracer attaches `probes` as the family's probe sets (those whose cookie
// has SS_COOKIE_STEADY outside the duty cycle), or, with `usdt`, calls the family's attach_usdt().
struct LibraryProbes {
  std::vector<Probe> probes;
  bool usdt = false;
};

class ProbeFamily {
 public:
  virtual ~ProbeFamily() = default;
  // The name in notes and drop counters ("cuda", "python-stack").
  virtual const char* name() const = 0;
  // Opens, configures and loads the skeleton; "" when loaded, else why not.
  virtual std::string load(uint32_t ringbuf_bytes, bool uprobe_multi) = 0;
  // Unloads it (waits for the kernel); safe to call twice.
  virtual void destroy() = 0;
  virtual bpf_object* object() const = 0;
  virtual bpf_map* events() const = 0;          // its ring buffer
  virtual const bpf_map* counters() const = 0;  // per-CPU SS_CNT_* counters
  // Uprobe families only: the call probes, the flag that says whether calls are recorded now (duty cycle), and
  // the per-thread stacks of calls in flight.
  virtual FamilyProgs progs() const { return {}; }
  virtual uint32_t* capture_flag() const { return nullptr; }
  virtual bpf_map* thread_map() const { return nullptr; }
  // The layer its events belong to.
  virtual Layer layer() const = 0;
  // Uprobe families: the probes of `lib` (its image `img`) that are this family's; empty where the library is not
  // the family's (each library kind belongs to one family).
  virtual LibraryProbes probes_for(const MappedLibrary& /*lib*/, const ElfImage& /*img*/, const ProbeContext& /*ctx*/) {
    return {};
  }
  // Probes of `lib` that the family keeps beside the family that owns the library, never duty-cycled (their cookies
  // carry SS_COOKIE_STEADY): the torch family's on the CUDA runtime's blocking synchronisations.
  virtual std::vector<Probe> probes_beside(const MappedLibrary& /*lib*/, const ElfImage& /*img*/,
                                           const ProbeContext& /*ctx*/) {
    return {};
  }
  // Families with USDT probes: attaches them to the binary at `host_path` for `pid_filter`, appending the links;
  // false (nothing attached, errno set) when it cannot.
  virtual bool attach_usdt(int /*pid_filter*/, const std::string& /*host_path*/, std::vector<bpf_link*>& /*links*/) {
    return false;
  }
};

// The probes of the catalog's calls of `layer` that `img` (a library of kind `kind`) exports: one per symbol found,
// the cookie from call_cookie(). `steady_timed`: calls that keep their return probe (blocking ones) get
// SS_COOKIE_STEADY, so the cost budget leaves them attached (the CUDA family under the budget).
std::vector<Probe> catalog_probes(const std::vector<CallSpec>& specs, Layer layer, LibraryKind kind,
                                  const ElfImage& img, bool full_detail, bool steady_timed);

// The sum over CPUs of one slot (SS_CNT_*) of a family's per-CPU counter array; 0 without the map.
uint64_t read_counter(const bpf_map* map, uint32_t slot);

// uprobe_multi programs are left unloaded where the kernel lacks them (before 6.6).
void skip_multi_programs(bpf_object* obj);

// The libbpf-tools sequence for any skeleton: open, size the ring buffer, configure rodata, load.
template <typename Skel, typename Configure>
std::string open_and_load(Skel*& skel, Skel* (*open)(), int (*load)(Skel*), void (*destroy)(Skel*),
                          uint32_t ringbuf_bytes, bool uprobe_multi, Configure&& configure) {
  skel = open();
  if (!skel) return std::string("open failed: ") + std::strerror(errno);
  bpf_map__set_max_entries(skel->maps.events, ringbuf_bytes);
  if (!uprobe_multi) skip_multi_programs(skel->obj);
  configure(skel);
  if (int rc = load(skel)) {
    destroy(skel);
    skel = nullptr;
    return std::string("load failed: ") + std::strerror(-rc);
  }
  return {};
}

// What a uprobe family's skeleton gives the tracer beyond its ring buffer and counters.
struct UprobeHandles {
  bpf_map* threads = nullptr;   // per-thread stacks of calls in flight
  uint32_t* capture = nullptr;  // 1: calls are recorded now (duty cycle)
  FamilyProgs progs;
};

// The handles of bpf/call_probe.bpf.h, named alike in every family built on it (cuda, nccl, python).
template <typename Skel>
UprobeHandles call_probe_handles(Skel* s) {
  return {s->maps.call_threads, &s->data->capture_enabled,
          {s->progs.call_entry, s->progs.call_return, s->progs.call_entry_multi, s->progs.call_return_multi}};
}

// The half of a family that is the same for every skeleton `Skel` (bpftool's <family>_bpf): loading and unloading
// it, and ProbeFamily's accessors to its maps and programs. Those are kept as libbpf handles when it loads, so the
// family's header needs the skeleton only declared; they are null before a load and after destroy().
template <typename Skel>
class SkeletonFamily : public ProbeFamily {
 public:
  ~SkeletonFamily() override { destroy(); }
  void destroy() final {
    if (skel_) unload_(skel_);
    skel_ = nullptr;
    obj_ = nullptr;
    events_ = nullptr;
    counters_ = nullptr;
    uprobe_ = {};
  }
  bpf_object* object() const final { return obj_; }
  bpf_map* events() const final { return events_; }
  const bpf_map* counters() const final { return counters_; }
  FamilyProgs progs() const final { return uprobe_.progs; }
  uint32_t* capture_flag() const final { return uprobe_.capture; }
  bpf_map* thread_map() const final { return uprobe_.threads; }

 protected:
  // open_and_load() into skel_; a uprobe family passes `uprobe_handles`, which names its UprobeHandles.
  template <typename Configure>
  std::string load_skeleton(Skel* (*open)(), int (*load)(Skel*), void (*unload)(Skel*), uint32_t ringbuf_bytes,
                            bool uprobe_multi, Configure&& configure,
                            UprobeHandles (*uprobe_handles)(Skel*) = nullptr) {
    std::string err = open_and_load(skel_, open, load, unload, ringbuf_bytes, uprobe_multi, configure);
    if (!err.empty()) return err;
    unload_ = unload;
    obj_ = skel_->obj;
    events_ = skel_->maps.events;
    counters_ = skel_->maps.counters;
    if (uprobe_handles) uprobe_ = uprobe_handles(skel_);
    return {};
  }

  Skel* skel_ = nullptr;

 private:
  void (*unload_)(Skel*) = nullptr;
  bpf_object* obj_ = nullptr;
  bpf_map* events_ = nullptr;
  const bpf_map* counters_ = nullptr;
  UprobeHandles uprobe_;
};

}  // namespace stackscope::trace
