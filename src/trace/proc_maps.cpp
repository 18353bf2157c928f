#include "trace/proc_maps.h"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace stackscope::trace {

std::vector<MapEntry> parse_proc_maps(const std::string& text) {
  std::vector<MapEntry> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // 7f..-7f.. r-xp 00001000 fd:01 1234   /usr/lib/x86_64-linux-gnu/libcudart.so.13
    unsigned long long start, end, offset, inode;
    char perms[8] = {};
    unsigned major, minor;
    int path_pos = -1;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &offset, &major, &minor,
                    &inode, &path_pos) < 7)
      continue;
    MapEntry e;
    e.start = start;
    e.end = end;
    e.offset = offset;
    e.exec = perms[2] == 'x';
    e.dev = (static_cast<uint64_t>(major) << 32) | minor;
    e.inode = inode;
    if (path_pos > 0 && static_cast<size_t>(path_pos) < line.size()) e.path = line.substr(path_pos);
    if (constexpr std::string_view kDeleted = " (deleted)";
        e.path.size() > kDeleted.size() && e.path.ends_with(kDeleted))
      e.path.resize(e.path.size() - kDeleted.size());
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<MapEntry> read_proc_maps(uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_proc_maps(ss.str());
}

const char* library_kind_name(LibraryKind k) {
  static const char* names[] = {"libcudart", "libcuda", "libnccl", "libtorch_cpu", "libtorch_cuda", "python"};
  auto i = static_cast<size_t>(k);
  return i < std::size(names) ? names[i] : "unknown";
}

std::optional<LibraryKind> classify_library(const std::string& path) {
  auto slash = path.rfind('/');
  std::string_view base = slash == std::string::npos ? std::string_view(path) : std::string_view(path).substr(slash + 1);
  if (base.starts_with("libcudart.so")) return LibraryKind::cudart;
  if (base.starts_with("libcuda.so")) return LibraryKind::cuda_driver;
  if (base.starts_with("libnccl.so")) return LibraryKind::nccl;
  if (base.starts_with("libtorch_cpu.so")) return LibraryKind::torch_cpu;
  if (base.starts_with("libtorch_cuda.so")) return LibraryKind::torch_cuda;
  if (base.starts_with("libpython3")) return LibraryKind::python;
  // python3, python3.12, python3.11d: the interpreter binary (Debian and pip builds link CPython statically).
  if (base.starts_with("python3")) {
    auto rest = base.substr(7);
    bool ok = true;
    for (char c : rest) ok = ok && (std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'd' || c == 'm');
    if (ok) return LibraryKind::python;
  }
  return std::nullopt;
}

std::vector<MappedLibrary> find_libraries(uint32_t pid, const std::vector<MapEntry>& maps) {
  std::vector<MappedLibrary> out;
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (auto& m : maps) {
    if (!m.exec || m.inode == 0 || m.path.empty() || m.path[0] != '/') continue;
    auto kind = classify_library(m.path);
    if (!kind || !seen.insert({m.dev, m.inode}).second) continue;
    out.push_back({*kind, m.path, "/proc/" + std::to_string(pid) + "/root" + m.path, m.dev, m.inode});
  }
  return out;
}

std::vector<uint32_t> list_pids() {
  std::vector<uint32_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (auto* e = ::readdir(d)) {
    char* end = nullptr;
    unsigned long v = std::strtoul(e->d_name, &end, 10);
    if (end && *end == 0 && v > 0) out.push_back(static_cast<uint32_t>(v));
  }
  ::closedir(d);
  return out;
}

}  // namespace stackscope::trace
