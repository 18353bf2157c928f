#include "trace/record_decoder.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include <fmt/format.h>

namespace stackscope::trace {

namespace {

std::string bounded(const char* s, size_t cap) { return std::string(s, strnlen(s, cap)); }

// The part every BPF record kind has: who ran it, and when.
template <class Record>
Event timed_event(Layer layer, const Record& r) {
  Event e;
  e.layer = layer;
  e.pid = r.pid;
  e.tid = r.tid;
  e.start_ns = static_cast<int64_t>(r.start_ns);
  e.duration_ns = static_cast<int64_t>(r.duration_ns);
  return e;
}

}  // namespace

RecordDecoder::RecordDecoder(std::vector<CallSpec> specs, KernelNamer kernel_name)
    : specs_(std::move(specs)), kernel_name_(std::move(kernel_name)) {}

std::optional<Event> RecordDecoder::decode_call(const ss_call_record& r) {
  if (r.call_id >= specs_.size()) return std::nullopt;
  const CallSpec& spec = specs_[r.call_id];
  Event e = timed_event(spec.layer, r);
  e.name = spec.name;
  if (spec.host_enqueue) e.flags |= kEventHostEnqueue;
  const bool entry_only = r.flags & SS_CALL_ENTRY_ONLY;  // no return probe: no duration, no return value
  if (entry_only) e.flags |= kEventInstant;
  int64_t count = -1, dtype = -1, comm = 0;
  bool has_comm = false;
  for (auto& f : spec.fields) {
    uint64_t w = r.args[f.index];
    switch (f.format) {
      case ArgFormat::u64:
        e.args.push_back({f.key, static_cast<int64_t>(w)});
        break;
      case ArgFormat::u32:
        e.args.push_back({f.key, static_cast<int64_t>(static_cast<uint32_t>(w))});
        break;
      case ArgFormat::hi32:
        e.args.push_back({f.key, static_cast<int64_t>(static_cast<uint32_t>(w >> 32))});
        break;
      case ArgFormat::i32:
        e.args.push_back({f.key, static_cast<int64_t>(static_cast<int32_t>(w))});
        break;
      case ArgFormat::nccl_dtype:
        dtype = static_cast<int32_t>(w);
        e.args.push_back({f.key, std::string(nccl_datatype_name(dtype))});
        break;
      case ArgFormat::nccl_redop:
        e.args.push_back({f.key, std::string(nccl_redop_name(static_cast<int32_t>(w)))});
        break;
      case ArgFormat::memcpy_kind:
        e.args.push_back({f.key, std::string(memcpy_kind_name(static_cast<int32_t>(w)))});
        break;
    }
    if (std::strcmp(f.key, "count") == 0) count = static_cast<int64_t>(w);
    if (std::strcmp(f.key, "comm") == 0) {
      comm = static_cast<int64_t>(w);
      has_comm = true;
    }
  }
  if (spec.direction) e.args.push_back({"direction", std::string(spec.direction)});
  if (spec.elem_size && count >= 0) e.args.push_back({"bytes", count * spec.elem_size});
  if (dtype >= 0 && count >= 0) {
    if (int size = nccl_datatype_size(dtype)) e.args.push_back({"bytes", count * size});
  }
  if (spec.has_ret && !entry_only) e.args.push_back({"ret", static_cast<int64_t>(static_cast<int32_t>(r.ret))});
  bool ok = !spec.has_ret || entry_only || static_cast<int32_t>(r.ret) == 0;

  switch (spec.role) {
    case CallRole::launch_host_fn: {
      uint64_t fn = r.args[spec.kernel_arg];
      std::string name = kernel_name_ ? kernel_name_(r.pid, fn) : std::string();
      e.args.push_back({"kernel", name.empty() ? fmt::format("0x{:x}", fn) : name});
      break;
    }
    case CallRole::launch_cufunction: {
      uint64_t fn = r.args[spec.kernel_arg];
      auto it = functions_.find({r.pid, fn});
      e.args.push_back({"kernel", it != functions_.end() ? it->second : fmt::format("CUfunction 0x{:x}", fn)});
      break;
    }
    case CallRole::module_get_function: {
      std::string name = bounded(r.str, sizeof r.str);
      e.args.push_back({"kernel", name});
      if (ok) functions_[{r.pid, r.args[SS_ARG_DEREF]}] = name;
      break;
    }
    case CallRole::nccl_init:
      if (ok)
        comms_[{r.pid, r.args[SS_ARG_DEREF]}] = {static_cast<int32_t>(r.args[2]), static_cast<int32_t>(r.args[1])};
      break;
    case CallRole::nccl_init_all: {
      int ndev = static_cast<int32_t>(r.args[1]);
      for (int i = 0; ok && i < ndev && i < SS_DEREF_WORDS; ++i) {
        comms_[{r.pid, r.args[SS_ARG_DEREF + i]}] = {i, ndev};
        e.args.push_back({fmt::format("comm{}", i), static_cast<int64_t>(r.args[SS_ARG_DEREF + i])});
      }
      break;
    }
    case CallRole::nccl_user_rank:
      if (ok) comms_[{r.pid, r.args[0]}].rank = static_cast<int32_t>(r.args[SS_ARG_DEREF]);
      break;
    case CallRole::nccl_destroy:
      comms_.erase({r.pid, r.args[0]});
      break;
    case CallRole::plain:
      break;
  }
  if (has_comm && spec.role != CallRole::nccl_init && spec.role != CallRole::nccl_user_rank) {
    auto it = comms_.find({r.pid, static_cast<uint64_t>(comm)});
    if (it != comms_.end()) {
      if (it->second.rank >= 0) e.args.push_back({"rank", static_cast<int64_t>(it->second.rank)});
      if (it->second.nranks >= 0) e.args.push_back({"nranks", static_cast<int64_t>(it->second.nranks)});
    }
  }
  e.args.push_back({"depth", static_cast<int64_t>(r.depth)});
  return e;
}

Event RecordDecoder::decode_torch(const ss_torch_record& r, std::string name) const {
  Event e = timed_event(Layer::torch, r);
  e.name = std::move(name);
  e.args.push_back({"depth", static_cast<int64_t>(r.depth)});
  return e;
}

Event RecordDecoder::decode_python(const ss_python_record& r) const {
  Event e = timed_event(Layer::python, r);
  e.name = bounded(r.func, sizeof r.func);
  if (r.flags & SS_PY_NO_ENTRY) e.flags |= kEventInstant;  // seen returning only: no duration
  e.args.push_back({"file", bounded(r.file, sizeof r.file)});
  e.args.push_back({"line", static_cast<int64_t>(r.line)});
  e.args.push_back({"depth", static_cast<int64_t>(r.depth)});
  return e;
}

void RecordDecoder::note_pycode(const ss_pycode_record& r) {
  pycodes_[{r.pid, r.code}] = {bounded(r.qualname, sizeof r.qualname), bounded(r.filename, sizeof r.filename),
                               r.firstlineno};
}

// On-CPU sample: "busy_loop", duration = the sampling period. Off-CPU: "sleepy (off-cpu)", duration = the time
// the thread was blocked there. args: file and line (first line) of the leaf function, stack (folded, outermost
// first, ';'-separated qualified names; "..." first when its outermost frames are missing), frames, sample
// ("cpu"|"off-cpu").
Event RecordDecoder::decode_pystack(const ss_pystack_record& r) const {
  Event e = timed_event(Layer::python, r);
  const uint32_t depth = std::min<uint32_t>(r.depth, SS_PYSTACK_DEPTH);
  auto code_of = [&](uint64_t code) -> const PyCode* {
    auto it = pycodes_.find({r.pid, code});
    return it == pycodes_.end() ? nullptr : &it->second;
  };
  auto name_of = [&](uint64_t code) {
    const PyCode* c = code_of(code);
    return c && !c->qualname.empty() ? c->qualname : fmt::format("<code 0x{:x}>", code);
  };
  std::string stack = (r.flags & SS_PYSTACK_TRUNCATED) ? "..." : "";
  for (uint32_t i = depth; i-- > 0;) stack += (stack.empty() ? "" : ";") + name_of(r.codes[i]);
  const bool offcpu = r.flags & SS_PYSTACK_OFFCPU;
  const uint64_t leaf = depth ? r.codes[0] : 0;
  const PyCode* lc = code_of(leaf);
  e.name = name_of(leaf) + (offcpu ? " (off-cpu)" : "");
  e.args.push_back({"file", lc ? lc->filename : std::string()});
  e.args.push_back({"line", static_cast<int64_t>(lc ? lc->firstlineno : 0)});
  e.args.push_back({"stack", std::move(stack)});
  e.args.push_back({"frames", static_cast<int64_t>(depth)});
  e.args.push_back({"sample", std::string(offcpu ? "off-cpu" : "cpu")});
  return e;
}

void RecordDecoder::forget_process(uint32_t pid) {
  auto drop = [pid](auto& m) {
    for (auto it = m.lower_bound({pid, 0}); it != m.end() && it->first.first == pid;) it = m.erase(it);
  };
  drop(comms_);
  drop(functions_);
  drop(pycodes_);
}

std::string torch_event_name(const std::string& s) {
  // Overload suffix: the last '_' followed by an upper-case letter or "out" (add_Tensor, mm_out, add__Scalar).
  for (size_t i = s.size(); i-- > 1;) {
    if (s[i] != '_') continue;
    std::string_view rest = std::string_view(s).substr(i + 1);
    if (rest.empty()) continue;
    if (std::isupper(static_cast<unsigned char>(rest[0])) || rest == "out" || rest.starts_with("out_")) {
      std::string op = s.substr(0, i);
      if (op.empty()) break;
      return "aten::" + op + "." + std::string(rest);
    }
  }
  return "aten::" + s;
}

}  // namespace stackscope::trace
