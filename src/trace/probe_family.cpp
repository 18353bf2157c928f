#include "trace/probe_family.h"

#include <algorithm>

#include "events.h"

namespace stackscope::trace {

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
