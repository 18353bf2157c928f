#include "trace/probe_family.h"

#include <bpf/bpf.h>

#include <algorithm>

#include "events.h"

namespace stackscope::trace {

uint64_t read_counter(const bpf_map* map, uint32_t slot) {
  int ncpu = libbpf_num_possible_cpus();
  if (!map || ncpu <= 0) return 0;
  std::vector<uint64_t> values(static_cast<size_t>(ncpu));
  if (bpf_map_lookup_elem(bpf_map__fd(map), &slot, values.data()) != 0) return 0;
  uint64_t sum = 0;
  for (auto v : values) sum += v;
  return sum;
}

void skip_multi_programs(bpf_object* obj) {
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, obj) {
    std::string name = bpf_program__name(prog);
    if (name.ends_with("_multi")) bpf_program__set_autoload(prog, false);
  }
}

std::vector<Probe> catalog_probes(const std::vector<CallSpec>& specs, Layer layer, LibraryKind kind,
                                  const ElfImage& img, bool full_detail, bool steady_timed) {
  std::vector<Probe> probes;
  for (uint32_t id = 0; id < specs.size(); ++id) {
    auto& spec = specs[id];
    if (spec.layer != layer || std::find(spec.libs.begin(), spec.libs.end(), kind) == spec.libs.end()) continue;
    for (auto& sym_name : spec.symbols)
      if (const ElfSymbol* sym = img.find(sym_name))
        if (auto off = img.vaddr_to_offset(sym->vaddr)) {
          uint64_t cookie = call_cookie(spec, id, full_detail);
          if (steady_timed && !spec.entry_only) cookie |= SS_COOKIE_STEADY;
          probes.emplace_back(*off, cookie);
        }
  }
  return probes;
}

}  // namespace stackscope::trace
