#include "trace/symbol_names.h"

#include <cxxabi.h>
#include <fnmatch.h>

#include <cstdlib>
#include <memory>

namespace stackscope::trace {

std::string demangle(std::string_view mangled) {
  if (!mangled.starts_with("_Z")) return std::string(mangled);
  std::string z(mangled);
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(z.c_str(), nullptr, nullptr, &status),
                                                  &std::free);
  return status == 0 && out ? std::string(out.get()) : z;
}

std::optional<std::string> torch_ops_struct(std::string_view mangled) {
  // Cheap filter on the mangled form (_ZN2at4_ops<len><op>4callE...) before demangling: libtorch_cpu exports
  // hundreds of thousands of symbols and only a few thousand are operator entries.
  constexpr std::string_view kPrefix = "_ZN2at4_ops";
  if (!mangled.starts_with(kPrefix)) return std::nullopt;
  size_t pos = kPrefix.size(), len = 0;
  while (pos < mangled.size() && mangled[pos] >= '0' && mangled[pos] <= '9') len = len * 10 + (mangled[pos++] - '0');
  if (len == 0 || pos + len > mangled.size() || mangled.substr(pos + len).rfind("4callE", 0) != 0)
    return std::nullopt;
  std::string op(mangled.substr(pos, len));
  std::string full = demangle(mangled);  // confirm: at::_ops::<op>::call(...)
  if (full.rfind("at::_ops::" + op + "::call(", 0) != 0) return std::nullopt;
  return op;
}

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (auto& p : patterns)
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

bool matches_any(const std::string& ops_struct, const TorchOpName* name, const std::vector<std::string>& patterns) {
  return matches_any(ops_struct, patterns) || (name && name->name != ops_struct && matches_any(name->name, patterns));
}

std::unordered_map<std::string, TorchOpName> torch_op_names(std::string_view rodata, const std::set<std::string>& structs) {
  std::unordered_map<std::string, TorchOpName> out;
  std::set<std::string> whole;  // found at a string's start: preferred over a match inside another string
  auto name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
  };
  for (size_t paren = rodata.find('('); paren != std::string_view::npos; paren = rodata.find('(', paren + 1)) {
    size_t begin = paren;
    while (begin > 0 && paren - begin < 256 && name_char(rodata[begin - 1])) --begin;
    // The linker merges a string into the tail of a longer one with the same ending (addmm's schema inside
    // sparse_sampled_addmm's): every start inside the name is a candidate, the string's own start first.
    const bool at_start = begin == 0 || rodata[begin - 1] == '\0';
    for (size_t b = begin; b < paren; ++b) {
      if (!(rodata[b] >= 'a' && rodata[b] <= 'z') && rodata[b] != '_') continue;
      std::string_view full = rodata.substr(b, paren - b);
      const size_t dot = full.find('.');
      if (dot != full.rfind('.') || dot == 0 || dot + 1 == full.size()) continue;
      std::string key(full);
      if (dot != std::string_view::npos) key[dot] = '_';
      if (!structs.count(key)) continue;
      const bool whole_here = at_start && b == begin;
      if (out.count(key) && (whole.count(key) || !whole_here)) continue;
      if (whole_here) whole.insert(key);
      out[key] = dot == std::string_view::npos ? TorchOpName{key, ""}
                                               : TorchOpName{std::string(full.substr(0, dot)), std::string(full.substr(dot + 1))};
    }
  }
  return out;
}

std::vector<std::string> default_torch_ops() {
  return {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "conv1d", "conv2d", "convolution", "relu", "relu_",
          "gelu", "silu", "layer_norm", "native_layer_norm", "group_norm", "batch_norm", "softmax", "_softmax",
          "log_softmax", "_log_softmax", "add", "add_", "mul", "mul_", "embedding",
          "cross_entropy_loss", "nll_loss", "nll_loss_forward", "mse_loss", "dropout",
          "scaled_dot_product_attention", "_scaled_dot_product_*attention", "*_backward", "*_backward_data",
          "*_backward_input", "sum", "mean", "sgd", "_foreach_add_*", "_fused_adam_", "_fused_adamw_",
          // their usual overloads again, for an image whose schema strings were not found (matched by struct name)
          "softmax_int", "log_softmax_int", "add_Tensor", "add__Tensor", "mul_Tensor", "mul__Tensor", "sum_dim_IntList",
          "mean_dim"};
}

}  // namespace stackscope::trace
