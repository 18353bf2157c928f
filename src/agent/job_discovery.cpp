#include "agent/job_discovery.h"

#include <dirent.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <re2/re2.h>

#include "model/clock.h"
#include "model/process.h"
#include "model/text.h"
#include "sample/procfs_parsers.h"
#include "trace/proc_maps.h"

namespace stackscope::agent {
namespace {

// A whole /proc file, read with plain read(2): the scan reads two per process every few seconds, and an ifstream
// copied through a stringstream cost as much as the kernel's side.
std::string slurp(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

bool all_hex(std::string_view s) {
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return !s.empty();
}

// The last 64-hex run in a path component ("docker-<id>.scope", "cri-containerd-<id>.scope", "<id>").
std::string container_id_in(std::string_view component) {
  for (size_t i = 0; i + 64 <= component.size(); ++i) {
    std::string_view cand = component.substr(i, 64);
    const bool bounded = (i == 0 || !std::isxdigit(static_cast<unsigned char>(component[i - 1]))) &&
                         (i + 64 == component.size() || !std::isxdigit(static_cast<unsigned char>(component[i + 64])));
    if (bounded && all_hex(cand)) return std::string(cand);
  }
  return {};
}

// "kubepods-burstable-pod1234_5678.slice" (systemd driver, dashes as underscores) or "pod1234-5678" (cgroupfs).
std::string pod_uid_in(std::string_view component) {
  const size_t at = component.rfind("pod");
  if (at == std::string_view::npos) return {};
  std::string_view rest = component.substr(at + 3);
  if (rest.ends_with(".slice")) rest.remove_suffix(6);
  std::string uid(rest);
  for (char& c : uid)
    if (c == '_') c = '-';
  // A UID is 36 characters of hex and dashes (8-4-4-4-12).
  if (uid.size() != 36) return {};
  for (char c : uid)
    if (c != '-' && !std::isxdigit(static_cast<unsigned char>(c))) return {};
  return uid;
}

struct RankEnvironment {
  std::string rank;  // RANK ("" when not set)
  long world = 0;    // WORLD_SIZE (0 when not set)
};

RankEnvironment rank_of(uint32_t pid) {
  const std::string env = process_rank_environment(pid);
  std::istringstream in(env);
  RankEnvironment r;
  for (std::string kv; in >> kv;) {
    if (kv.starts_with("RANK=")) r.rank = printable_text(kv.substr(5));
    if (kv.starts_with("WORLD_SIZE=")) r.world = std::strtol(kv.c_str() + 11, nullptr, 10);
  }
  return r;
}

// The real user id on /proc/PID/status's "Uid:" line (real, effective, saved, filesystem). Not the owner of
// /proc/PID: a process that makes itself non-dumpable shows as root's there.
uint32_t real_uid(const std::string& status) {
  const size_t at = status.find("\nUid:");
  if (at == std::string::npos) return UINT32_MAX;
  return static_cast<uint32_t>(std::strtoul(status.c_str() + at + 5, nullptr, 10));
}

}  // namespace

CgroupLabels parse_cgroup_labels(std::string_view text) {
  CgroupLabels out;
  std::string_view best;  // the v2 path, else the longest v1 path
  size_t from = 0;
  while (from < text.size()) {
    size_t eol = text.find('\n', from);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(from, eol - from);
    from = eol + 1;
    // hierarchy-ID:controller-list:cgroup-path
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view path = line.substr(c2 + 1);
    if (line.substr(0, c2) == "0:") {
      out.cgroup = printable_text(path);
      best = path;
      break;
    }
    if (path.size() > best.size()) best = path;
  }
  // Components from the innermost: the container is the deepest id, the pod the nearest pod component.
  size_t end = best.size();
  while (end > 0) {
    size_t slash = best.rfind('/', end - 1);
    const size_t begin = slash == std::string_view::npos ? 0 : slash + 1;
    std::string_view comp = best.substr(begin, end - begin);
    if (out.container_id.empty()) out.container_id = container_id_in(comp);
    if (out.pod_uid.empty()) out.pod_uid = pod_uid_in(comp);
    if (slash == std::string_view::npos) break;
    end = slash;
  }
  return out;
}

unsigned job_library_mask(const std::vector<std::string>& names) {
  unsigned m = 0;
  for (const auto& n : names) m |= n == "cuda" ? kJobCuda : n == "nccl" ? kJobNccl : n == "torch" ? kJobTorch : 0u;
  return m;
}

CommandFilter::CommandFilter(const std::string& pattern) {
  RE2::Options opt;
  opt.set_log_errors(false);  // the error is the exception's, said once by whoever loads the setting
  // The compiled program and its DFA cache stay within this (a DFA out of room falls back to RE2's NFA: slower,
  // still linear); a pattern that does not fit is refused at load.
  opt.set_max_mem(2 << 20);
  re_ = std::make_unique<re2::RE2>(pattern, opt);
  if (!re_->ok()) throw std::invalid_argument(re_->error());
}

CommandFilter::~CommandFilter() = default;

bool CommandFilter::matches(std::string_view command) const { return RE2::PartialMatch(command, *re_); }

bool is_job_library(int fd, trace::LibraryKind kind) {
  std::string_view soname_prefix, entry;  // an entry ending in '*' is a prefix
  switch (kind) {
    case trace::LibraryKind::cudart: soname_prefix = "libcudart.so", entry = "cudaLaunchKernel"; break;
    case trace::LibraryKind::cuda_driver: soname_prefix = "libcuda.so", entry = "cuLaunchKernel"; break;
    case trace::LibraryKind::nccl: soname_prefix = "libnccl.so", entry = "ncclAllReduce"; break;
    case trace::LibraryKind::torch_cpu: soname_prefix = "libtorch_cpu.so", entry = "_ZN2at*"; break;
    case trace::LibraryKind::torch_cuda: soname_prefix = "libtorch_cuda.so", entry = "_ZN2at*"; break;
    default: return false;
  }
  const bool prefix = entry.ends_with('*');
  if (prefix) entry.remove_suffix(1);
  static const bool libelf_ready = elf_version(EV_CURRENT) != EV_NONE;
  if (!libelf_ready) return false;
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (!elf) return false;
  std::string soname;
  bool exported = false;
  GElf_Ehdr eh;
  if (elf_kind(elf) == ELF_K_ELF && gelf_getehdr(elf, &eh) && eh.e_type == ET_DYN) {
    for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf, scn)) != nullptr;) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh)) continue;
      Elf_Data* data = sh.sh_type == SHT_DYNAMIC || sh.sh_type == SHT_DYNSYM ? elf_getdata(scn, nullptr) : nullptr;
      if (!data) continue;
      if (sh.sh_type == SHT_DYNAMIC) {
        GElf_Dyn dyn;
        for (int i = 0; gelf_getdyn(data, i, &dyn) && dyn.d_tag != DT_NULL; ++i)
          if (dyn.d_tag == DT_SONAME)
            if (const char* name = elf_strptr(elf, sh.sh_link, dyn.d_un.d_val)) soname = name;
        continue;
      }
      GElf_Sym sym;
      for (int i = 0; !exported && gelf_getsym(data, i, &sym); ++i) {
        const int bind = GELF_ST_BIND(sym.st_info);
        if (sym.st_shndx == SHN_UNDEF || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
            (bind != STB_GLOBAL && bind != STB_WEAK))
          continue;
        const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
        exported = name && (prefix ? std::string_view(name).starts_with(entry) : std::string_view(name) == entry);
      }
    }
  }
  elf_end(elf);
  return exported && (soname.empty() || soname.starts_with(soname_prefix));
}

std::set<std::string> remnants_of(const Job& traced, const std::map<std::string, Job>& found) {
  std::set<std::string> out;
  for (const auto& [id, job] : found) {
    // Its processes that map a job library (not a launcher found above them: a subreaper that adopted them).
    size_t mapping = 0;
    const bool within = std::all_of(job.processes.begin(), job.processes.end(), [&](const auto& p) {
      if (!p.second.libraries) return true;
      ++mapping;
      auto it = traced.processes.find(p.first);
      return it != traced.processes.end() && it->second.start_ticks == p.second.start_ticks;
    });
    if (within && mapping && id != traced.id) out.insert(id);
  }
  return out;
}

JobScanner::JobScanner(unsigned library_mask, std::string proc_root) : mask_(library_mask), root_(std::move(proc_root)) {}

unsigned JobScanner::libraries_of(const std::string& dir, const std::string& maps_text) {
  unsigned m = 0;
  for (const auto& e : trace::parse_proc_maps(maps_text)) {
    if (!e.exec || e.path.empty() || e.path[0] != '/') continue;
    const auto kind = trace::classify_library(e.path);
    if (!kind) continue;
    unsigned bit = 0;
    switch (*kind) {
      case trace::LibraryKind::cudart:
      case trace::LibraryKind::cuda_driver: bit = kJobCuda; break;
      case trace::LibraryKind::nccl: bit = kJobNccl; break;
      case trace::LibraryKind::torch_cpu:
      case trace::LibraryKind::torch_cuda: bit = kJobTorch; break;
      default: break;
    }
    if ((bit & mask_) && !(m & bit) && verified(dir, e, *kind)) m |= bit;
  }
  return m;
}

bool JobScanner::verified(const std::string& dir, const trace::MapEntry& e, trace::LibraryKind kind) {
  // The mapped file itself (map_files: root may open it, also once deleted or renamed); else its path in the
  // process's mount namespace while that is still the mapped file.
  int fd = ::open(fmt::format("{}/map_files/{:x}-{:x}", dir, e.start, e.end).c_str(), O_RDONLY | O_CLOEXEC);
  bool by_path = false;
  if (fd < 0) {
    fd = ::open((dir + "/root" + e.path).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    by_path = true;
  }
  if (fd < 0) return false;
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (by_path && st.st_ino != e.inode)) {
    ::close(fd);
    return false;
  }
  const auto id = std::make_tuple(static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                                  static_cast<int64_t>(st.st_size),
                                  static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
                                  static_cast<int>(kind));
  if (auto it = verified_.find(id); it != verified_.end()) {
    ::close(fd);
    return it->second;
  }
  if (verified_.size() >= 4096) verified_.clear();  // files made to fill it: read again, never unbounded
  const bool ok = is_job_library(fd, kind);
  ::close(fd);
  verified_[id] = ok;
  return ok;
}

std::map<std::string, Job> JobScanner::scan() {
  struct Proc {
    uint32_t ppid = 0;
    uint64_t start_ticks = 0;
    std::string comm;
  };
  std::map<uint32_t, Proc> procs;  // every live process (for the ancestor walk)
  std::map<uint32_t, JobProcess> job_procs;
  std::map<uint32_t, Seen> next_seen;
  std::set<uint32_t> multi_rank;  // job processes that are one rank of several (RANK set, WORLD_SIZE >= 2)
  const uint32_t self = static_cast<uint32_t>(::getpid());
  const int64_t now = monotonic_ns();
  constexpr int64_t kMapsReread = 30'000'000'000;
  DIR* d = ::opendir(root_.c_str());
  if (!d) return {};
  while (auto* e = ::readdir(d)) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(e->d_name, &end, 10);
    if (!end || *end || v == 0) continue;
    const auto pid = static_cast<uint32_t>(v);
    const std::string dir = root_ + "/" + e->d_name;
    const std::string stat_text = slurp(dir + "/stat");
    procfs::PidStat st;
    if (stat_text.empty() || !procfs::parse_pid_stat(stat_text, st).ok()) continue;  // gone meanwhile
    procs[pid] = {st.ppid, st.start_time, procfs::printable_comm(st.comm)};
    Seen s;
    if (auto it = seen_.find(pid); it != seen_.end() && it->second.start_ticks == st.start_time) s = it->second;
    s.start_ticks = st.start_time;
    if (!s.kernel_thread && pid != self) {
      // statm's first field: pages mapped. A dlopen (import torch) changes it; an idle process does not.
      const std::string statm = slurp(dir + "/statm");
      const uint64_t pages = std::strtoull(statm.c_str(), nullptr, 10);
      if (statm.empty()) continue;
      if (pages == 0) {
        s.kernel_thread = true;
      } else if (pages != s.mapped_pages) {
        s.mapped_pages = pages;
        // A job process's mapped size changes with its large allocations (a torch process's all the time): its maps
        // (thousands of lines) are read again only when it may have become something else (a new name: an exec)
        // or 30 s after the last read (a library loaded since); any other process's at each change, so that a new
        // job is found at the next scan.
        const bool known = (s.libraries & mask_) && s.comm == procs[pid].comm && now - s.maps_read_ns < kMapsReread;
        if (!known) {
          s.maps_read_ns = now;
          s.libraries = libraries_of(dir, slurp(dir + "/maps"));
          // Read with the maps: an exec (a new environment) changes the mapped size too.
          const RankEnvironment env = (s.libraries & mask_) ? rank_of(pid) : RankEnvironment{};
          s.rank = env.rank;
          s.multi_rank = !env.rank.empty() && env.world >= 2;
        }
      }
    }
    s.comm = procs[pid].comm;
    next_seen[pid] = s;
    if (s.libraries & mask_) {
      JobProcess jp;
      jp.pid = pid;
      jp.ppid = st.ppid;
      jp.start_ticks = st.start_time;
      jp.comm = procs[pid].comm;
      jp.libraries = s.libraries & mask_;
      jp.rank = s.rank;
      job_procs[pid] = std::move(jp);
      if (s.multi_rank) multi_rank.insert(pid);
    }
  }
  ::closedir(d);
  seen_.swap(next_seen);

  std::map<std::string, Job> jobs;
  for (auto& [pid, jp] : job_procs) {
    // The topmost job process among its ancestors (a launcher and its ranks are one job).
    uint32_t leader = pid;
    uint32_t at = jp.ppid;
    for (int depth = 0; at > 1 && depth < 64; ++depth) {
      if (job_procs.count(at)) leader = at;
      auto it = procs.find(at);
      if (it == procs.end()) break;
      at = it->second.ppid;
    }
    // A rank whose launcher maps none of the libraries (a launcher script that starts one process per rank, as
    // torchrun would, without importing torch): the launcher leads, so the ranks of one job are one job (one
    // tracer, one incident engine, ranks compared), not one job each. Only within the launcher's cgroup: a
    // container's init or runtime shim above a rank of a multi-node job is not its launcher.
    std::optional<JobProcess> launcher;
    if (leader == pid && multi_rank.count(pid) && jp.ppid > 1 && jp.ppid != self) {
      auto parent = procs.find(jp.ppid);
      const std::string cgroup = slurp(root_ + "/" + std::to_string(pid) + "/cgroup");
      if (parent != procs.end() && !cgroup.empty() &&
          slurp(root_ + "/" + std::to_string(jp.ppid) + "/cgroup") == cgroup) {
        leader = jp.ppid;
        launcher.emplace();
        launcher->pid = jp.ppid;
        launcher->ppid = parent->second.ppid;
        launcher->start_ticks = parent->second.start_ticks;
        launcher->comm = parent->second.comm;
      }
    }
    const JobProcess& lead = launcher ? *launcher : job_procs[leader];
    const std::string id = fmt::format("{}-{}", leader, lead.start_ticks);
    Job& job = jobs[id];
    if (job.id.empty()) {
      job.id = id;
      job.name = fmt::format("{}-{}", lead.comm, leader);
      job.leader = leader;
    }
    if (launcher) job.processes.try_emplace(leader, *launcher);
    job.libraries |= jp.libraries;
    job.processes[pid] = jp;
  }
  for (auto& [id, job] : jobs) {
    job.labels = parse_cgroup_labels(slurp(root_ + "/" + std::to_string(job.leader) + "/cgroup"));
    std::string command = slurp(root_ + "/" + std::to_string(job.leader) + "/cmdline");
    while (!command.empty() && command.back() == '\0') command.pop_back();
    for (char& ch : command)
      if (ch == '\0') ch = ' ';
    job.command = printable_text(command);
    // Whose job: the user of its leader, or of its first process that maps a job library when the leader is a
    // launcher that maps none (one started under `sudo -u`, say, whose parent is root's).
    uint32_t owner = job.leader;
    if (!job.processes.at(job.leader).libraries)
      for (const auto& [pid, p] : job.processes)
        if (p.libraries) {
          owner = pid;
          break;
        }
    job.uid = real_uid(slurp(root_ + "/" + std::to_string(owner) + "/status"));
  }
  return jobs;
}

}  // namespace stackscope::agent
