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

std::vector<std::string> default_torch_ops() {
  return {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "conv1d", "conv2d", "convolution", "relu", "relu_",
          "gelu", "silu", "layer_norm", "native_layer_norm", "group_norm", "batch_norm", "softmax_int", "_softmax",
          "log_softmax_int", "_log_softmax", "add_Tensor", "add__Tensor", "mul_Tensor", "mul__Tensor", "embedding",
          "cross_entropy_loss", "nll_loss", "nll_loss_forward", "mse_loss", "dropout",
          "scaled_dot_product_attention", "_scaled_dot_product_*attention", "*_backward", "*_backward_data",
          "*_backward_input", "sum_dim_IntList", "mean_dim", "sgd", "_foreach_add_*", "_fused_adam_",
          "_fused_adamw_"};
}

}  // namespace stackscope::trace
