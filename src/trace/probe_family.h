// One probe family: the BPF skeleton of one bpf/<family>.bpf.c, loaded, and the maps that the tracer reads and
// writes for every family alike (ring buffer, counters, capture flag, per-thread call stacks). Each family is a
// <family>_probes.{h,cpp} pair beside its program; UprobeTracer (uprobe_tracer.h) owns them.
#pragma once
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace stackscope::trace {

// The programs a uprobe family attaches per library: single-probe and uprobe_multi variants.
struct FamilyProgs {
  bpf_program *entry = nullptr, *ret = nullptr, *entry_multi = nullptr, *ret_multi = nullptr;
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
};

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

}  // namespace stackscope::trace
