// Which traced libraries a process has mapped, read from /proc/PID/maps. Paths are opened through
// /proc/PID/root so that libraries inside containers (other mount namespaces) are found without guessing.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stackscope::trace {

struct MapEntry {
  uint64_t start = 0, end = 0, offset = 0;
  bool exec = false;
  uint64_t dev = 0, inode = 0;
  std::string path;  // as the process sees it
};

// Empty when the process is gone or unreadable.
std::vector<MapEntry> read_proc_maps(uint32_t pid);
// Parses the text of a maps file (exposed for tests).
std::vector<MapEntry> parse_proc_maps(const std::string& text);

enum class LibraryKind : uint8_t { cudart, cuda_driver, nccl, torch_cpu, torch_cuda, python, kCount };
const char* library_kind_name(LibraryKind k);
// Classifies a mapped file by its base name (libcudart.so.13, libcuda.so.1, libnccl.so.2, libtorch_cpu.so,
// libtorch_cuda.so, libpython3.X.so, python3.X). Python binaries are confirmed later by their symbols.
std::optional<LibraryKind> classify_library(const std::string& path);

struct MappedLibrary {
  LibraryKind kind;
  std::string path;       // inside the process
  std::string host_path;  // /proc/PID/root/<path>: openable from here
  uint64_t dev = 0, inode = 0;
};

// One entry per distinct traced file (by inode) that the process maps executable.
std::vector<MappedLibrary> find_libraries(uint32_t pid, const std::vector<MapEntry>& maps);

// Pids of all processes (for --all).
std::vector<uint32_t> list_pids();

}  // namespace stackscope::trace
