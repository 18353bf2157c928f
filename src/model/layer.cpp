#include "model/layer.h"

#include <algorithm>
#include <stdexcept>

namespace stackscope {

namespace {
constexpr std::string_view kNames[] = {"cuda", "nccl", "torch", "python", "kernel", "nvml", "host"};
}

std::string_view layer_name(Layer l) {
  auto i = static_cast<size_t>(l);
  return i < std::size(kNames) ? kNames[i] : std::string_view("unknown");
}

std::optional<Layer> parse_layer(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (kNames[i] == name) return static_cast<Layer>(i);
  return std::nullopt;
}

std::vector<Layer> all_layers() {
  std::vector<Layer> out;
  for (size_t i = 0; i < std::size(kNames); ++i) out.push_back(static_cast<Layer>(i));
  return out;
}

std::vector<Layer> parse_layer_list(std::string_view list) {
  // "all" combines with others ("all,host" is all); a layer named twice is one layer (its samples were stored
  // twice otherwise). The order is the first mention's.
  std::vector<Layer> out;
  auto add = [&out](Layer l) {
    if (std::find(out.begin(), out.end(), l) == out.end()) out.push_back(l);
  };
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    auto item = list.substr(pos, comma - pos);
    if (item == "all") {
      for (Layer l : all_layers()) add(l);
    } else if (!item.empty()) {
      auto l = parse_layer(item);
      if (!l)
        throw std::invalid_argument("unknown layer '" + std::string(item) +
                                    "' (known: cuda, nccl, torch, python, kernel, nvml, host, all)");
      add(*l);
    }
    pos = comma + 1;
  }
  if (out.empty()) throw std::invalid_argument("empty layer list");
  return out;
}

}  // namespace stackscope
