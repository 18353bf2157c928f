#include "trace/probe_family.h"

namespace stackscope::trace {

void skip_multi_programs(bpf_object* obj) {
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, obj) {
    std::string name = bpf_program__name(prog);
    if (name.ends_with("_multi")) bpf_program__set_autoload(prog, false);
  }
}

}  // namespace stackscope::trace
