// CPython struct offsets for the python stack sampler (bpf/pystack.bpf.c, --python-mode stack), per version, and
// how an interpreter file's version and _PyRuntime are found. x86-64 release builds of 3.11 and 3.12; measured in
// the live interpreters by eval/tracing/python_offsets.py (which compares them with this table through
// `stackscope record --python-offsets`).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "events.h"
#include "trace/elf_symbols.h"

namespace stackscope::trace {

struct PythonVersion {
  int major = 0, minor = 0;
};

// The offsets of CPython major.minor, or nullptr when stackscope has none (before 3.11, 3.13 and later).
const ss_py_offsets* python_offsets(PythonVersion v);
// Every table as JSON: {"3.11": {"runtime_interpreters_head": 40, ...}, ...}.
std::string python_offsets_json();
// The version of the interpreter in `img` (a python binary or libpython): the Py_Version constant (3.11+), else the
// file name (python3.12, libpython3.11.so.1.0). nullopt when neither says.
std::optional<PythonVersion> python_version(const ElfImage& img);

}  // namespace stackscope::trace
