// C++ symbol names: demangling, and recognising PyTorch's operator entry points `at::_ops::<op>::call`.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope::trace {

// abi::__cxa_demangle; the input unchanged when it is not a mangled C++ name.
std::string demangle(std::string_view mangled);
// "addmm" for the mangled `at::_ops::addmm::call(...)`; nullopt for anything else (redispatch, other classes).
std::optional<std::string> torch_ops_struct(std::string_view mangled);
// Shell-style match ('*', '?') of an operator struct name against the configured patterns.
bool matches_any(const std::string& name, const std::vector<std::string>& patterns);
// Common forward and backward operators of training loops (struct names or patterns).
std::vector<std::string> default_torch_ops();

}  // namespace stackscope::trace
