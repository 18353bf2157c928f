#include "trace/python_offsets.h"

#include <cstring>
#include <regex>

#include <fmt/format.h>

namespace stackscope::trace {

namespace {

// Measured with eval/tracing/python_offsets.py in Debian's 3.11.2 and pyenv's 3.12.1 (x86-64); they agree with
// the v3.11/v3.12 headers (Include/internal/pycore_frame.h, pycore_runtime.h, pycore_interp.h,
// Include/cpython/pystate.h, code.h, unicodeobject.h). 3.12 moved f_code to the frame's start, added the C-stack
// shim frame (owner 3) and dropped PyASCIIObject.wstr.
constexpr ss_py_offsets kPy311 = {
    .runtime_interpreters_head = 40, .interp_next = 0, .interp_threads_head = 16, .tstate_next = 8,
    .tstate_native_thread_id = 160, .tstate_cframe = 56, .cframe_current_frame = 8, .frame_code = 32,
    .frame_previous = 48, .frame_owner = 69, .code_filename = 112, .code_name = 120, .code_qualname = 128,
    .code_firstlineno = 72, .unicode_state = 32, .unicode_length = 16, .unicode_ascii_data = 48,
    .owner_cstack = 0xff, .pad = {}};
constexpr ss_py_offsets kPy312 = {
    .runtime_interpreters_head = 40, .interp_next = 0, .interp_threads_head = 72, .tstate_next = 8,
    .tstate_native_thread_id = 144, .tstate_cframe = 56, .cframe_current_frame = 0, .frame_code = 0,
    .frame_previous = 8, .frame_owner = 70, .code_filename = 112, .code_name = 120, .code_qualname = 128,
    .code_firstlineno = 68, .unicode_state = 32, .unicode_length = 16, .unicode_ascii_data = 40,
    .owner_cstack = 3, .pad = {}};

std::string table_json(const ss_py_offsets& o) {
  return fmt::format(
      "{{\"runtime_interpreters_head\": {}, \"interp_next\": {}, \"interp_threads_head\": {}, \"tstate_next\": {}, "
      "\"tstate_native_thread_id\": {}, \"tstate_cframe\": {}, \"cframe_current_frame\": {}, \"frame_code\": {}, "
      "\"frame_previous\": {}, \"frame_owner\": {}, \"code_filename\": {}, \"code_name\": {}, \"code_qualname\": {}, "
      "\"code_firstlineno\": {}, \"unicode_state\": {}, \"unicode_length\": {}, \"unicode_ascii_data\": {}, "
      "\"owner_cstack\": {}}}",
      o.runtime_interpreters_head, o.interp_next, o.interp_threads_head, o.tstate_next, o.tstate_native_thread_id,
      o.tstate_cframe, o.cframe_current_frame, o.frame_code, o.frame_previous, o.frame_owner, o.code_filename,
      o.code_name, o.code_qualname, o.code_firstlineno, o.unicode_state, o.unicode_length, o.unicode_ascii_data,
      o.owner_cstack);
}

}  // namespace

const ss_py_offsets* python_offsets(PythonVersion v) {
  if (v.major != 3) return nullptr;
  if (v.minor == 11) return &kPy311;
  if (v.minor == 12) return &kPy312;
  return nullptr;
}

std::string python_offsets_json() {
  return fmt::format("{{\"3.11\": {}, \"3.12\": {}}}\n", table_json(kPy311), table_json(kPy312));
}

std::optional<PythonVersion> python_version(const ElfImage& img) {
  // Py_Version = PY_VERSION_HEX: 0xMMmmppRS.
  if (auto at = img.find_object("Py_Version"))
    if (auto bytes = img.read_at(*at, 4)) {
      uint32_t hex = 0;
      std::memcpy(&hex, bytes->data(), 4);
      if ((hex >> 24) == 3) return PythonVersion{3, static_cast<int>((hex >> 16) & 0xff)};
    }
  static const std::regex name(R"((?:^|/)(?:lib)?python(\d+)\.(\d+)[^/]*$)");
  std::smatch m;
  if (std::regex_search(img.path(), m, name)) return PythonVersion{std::stoi(m[1]), std::stoi(m[2])};
  return std::nullopt;
}

}  // namespace stackscope::trace
