// Where an event or a series comes from. Names are what `--layers` accepts.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope {

enum class Layer : uint8_t { cuda = 0, nccl, torch, python, kernel, nvml, host, kCount };

std::string_view layer_name(Layer l);
std::optional<Layer> parse_layer(std::string_view name);
// Parses "cuda,nccl,host", "all" or "all,host" (all of them); a layer named twice counts once. Throws
// std::invalid_argument naming the bad entry.
std::vector<Layer> parse_layer_list(std::string_view list);
std::vector<Layer> all_layers();

}  // namespace stackscope
