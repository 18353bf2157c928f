#include "export/layer_summary.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace stackscope {

namespace {

// Totals keyed by a string id of the recording (names and kernel arguments are interned there).
using Totals = std::unordered_map<uint32_t, NameTotal>;

std::vector<NameTotal> top_of(const Totals& t, const RecordingReader& r, size_t top, const std::string& suffix_to_strip = "") {
  std::vector<NameTotal> out;
  out.reserve(t.size());
  for (const auto& [id, v] : t) {
    NameTotal n = v;
    n.name = std::string(r.string_view_at(id));
    if (!suffix_to_strip.empty() && n.name.size() > suffix_to_strip.size() &&
        n.name.compare(n.name.size() - suffix_to_strip.size(), suffix_to_strip.size(), suffix_to_strip) == 0)
      n.name.resize(n.name.size() - suffix_to_strip.size());
    out.push_back(std::move(n));
  }
  std::sort(out.begin(), out.end(), [](const NameTotal& a, const NameTotal& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.count > b.count;
  });
  if (out.size() > top) out.resize(top);
  return out;
}

void add(Totals& t, uint32_t id, int64_t duration_ns, double bytes) {
  NameTotal& n = t[id];
  ++n.count;
  n.total_ns += static_cast<double>(std::max<int64_t>(duration_ns, 0));
  n.bytes += bytes;
}

}  // namespace

LayerSummary summarise_layers(const RecordingReader& r, size_t top) {
  LayerSummary out;
  const std::optional<uint32_t> kernel_key = r.find_string("kernel"), bytes_key = r.find_string("bytes"),
                                sample_key = r.find_string("sample"), offcpu = r.find_string("off-cpu");
  Totals kernels, cuda, torch, py, py_blocked, nccl;
  uint64_t by_layer[static_cast<size_t>(Layer::kCount)] = {};
  EventFilter filter;
  filter.layers = {Layer::cuda, Layer::nccl, Layer::torch, Layer::python};
  r.for_each_event_ref(filter, [&](const codec::EventRef& e) {
    ++by_layer[static_cast<size_t>(e.layer)];
    const bool timed = !(e.flags & (kEventInstant | kEventUnfinished));
    const int64_t dur = timed ? e.duration_ns : 0;
    double bytes = 0;
    if (bytes_key)
      if (const codec::ArgRef* b = e.arg(*bytes_key); b && b->kind == codec::ArgKind::integer)
        bytes = static_cast<double>(std::max<int64_t>(b->integer, 0));
    switch (e.layer) {
      case Layer::cuda:
        add(cuda, e.name, dur, bytes);
        if (kernel_key)
          if (const codec::ArgRef* k = e.arg(*kernel_key); k && k->kind == codec::ArgKind::string)
            add(kernels, k->text, dur, 0);
        break;
      case Layer::torch: add(torch, e.name, dur, 0); break;
      case Layer::nccl: add(nccl, e.name, dur, bytes); break;
      case Layer::python: {
        const codec::ArgRef* s = sample_key ? e.arg(*sample_key) : nullptr;
        if (s && s->kind == codec::ArgKind::string) {
          out.python_sampled = true;
          add(offcpu && s->text == *offcpu ? py_blocked : py, e.name, e.duration_ns, 0);
        } else {
          add(py, e.name, dur, 0);
        }
        break;
      }
      default: break;
    }
  });
  for (size_t l = 0; l < static_cast<size_t>(Layer::kCount); ++l)
    if (by_layer[l]) out.events_by_layer[std::string(layer_name(static_cast<Layer>(l)))] = by_layer[l];
  out.kernels = top_of(kernels, r, top);
  out.cuda_calls = top_of(cuda, r, top);
  out.torch_ops = top_of(torch, r, top);
  out.python_functions = top_of(py, r, top);
  out.python_blocked = top_of(py_blocked, r, top, " (off-cpu)");
  out.nccl = top_of(nccl, r, top);
  return out;
}

}  // namespace stackscope
