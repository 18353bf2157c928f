// C++ symbol names: demangling, and recognising PyTorch's operator entry points `at::_ops::<op>::call`.
#pragma once
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope::trace {

// abi::__cxa_demangle; the input unchanged when it is not a mangled C++ name.
std::string demangle(std::string_view mangled);
// "addmm" for the mangled `at::_ops::addmm::call(...)`; nullopt for anything else (redispatch, other classes).
std::optional<std::string> torch_ops_struct(std::string_view mangled);
// An operator's name and overload as torch.profiler and the dispatcher know them: {"sum", "dim_IntList"} for the
// struct sum_dim_IntList, {"addmm", ""} for addmm.
struct TorchOpName {
  std::string name, overload;
};
// The names of the at::_ops structs in `structs`, read from the schema strings that libtorch_cpu registers its
// operators with ("sum.dim_IntList(Tensor self, ...", in its .rodata: `rodata`). A struct's name joins operator and
// overload with '_', so where the overload begins cannot be told from it alone (mse_loss_backward_grad_input,
// softmax_int). Structs with no schema string there are left out.
std::unordered_map<std::string, TorchOpName> torch_op_names(std::string_view rodata, const std::set<std::string>& structs);
// Shell-style match ('*', '?') of an operator struct name against the configured patterns.
bool matches_any(const std::string& name, const std::vector<std::string>& patterns);
// Whether an operator is probed: its struct name (add_Tensor) or its name without the overload (mse_loss_backward:
// every overload of it, as torch.profiler counts them all under that name) matches a pattern.
bool matches_any(const std::string& ops_struct, const TorchOpName* name, const std::vector<std::string>& patterns);
// Common forward and backward operators of training loops (operator or struct names, or patterns): operators by
// name (sum, not sum_dim_IntList), every overload, as torch.profiler counts them.
std::vector<std::string> default_torch_ops();

}  // namespace stackscope::trace
