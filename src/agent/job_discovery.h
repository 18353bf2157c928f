// Which GPU/ML jobs run on this node: processes that map libcuda/libcudart, libnccl or libtorch (read from
// /proc/PID/maps, trace/proc_maps.h), grouped into jobs, with the container and pod they run in (from
// /proc/PID/cgroup) as labels. A job is the topmost such process and every such process below it (a launcher and
// its ranks, e.g. torchrun or torch.multiprocessing), so the ranks of one job are traced and labelled together.
// Ranks (RANK and WORLD_SIZE >= 2 in their environment) whose launcher maps none of the libraries are led by that
// launcher, when it runs in their cgroup: one job of launcher and ranks, as under torchrun.
// Any user can start a process that maps a file named libcudart.so: a mapped file counts only when its ELF says it
// is that library (is_job_library), and the agent limits the jobs of each user (agent.cpp). Text read from /proc
// (names, command lines, cgroup paths, RANK) is printable UTF-8 from here on (model/text.h).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "trace/proc_maps.h"

namespace re2 {
class RE2;
}

namespace stackscope::agent {

// discovery.command_filter, compiled once per configuration. RE2: time linear in the command line's length and
// memory bounded, so a command line of megabytes (any user's process may have one) costs a scan milliseconds and
// cannot exhaust the agent's stack, as a backtracking engine's recursion would.
class CommandFilter {
 public:
  // Throws std::invalid_argument with RE2's reason when `pattern` is not an RE2 expression or needs more memory
  // than the filter's budget.
  explicit CommandFilter(const std::string& pattern);
  ~CommandFilter();
  bool matches(std::string_view command) const;  // anywhere in it, as grep does

 private:
  std::unique_ptr<re2::RE2> re_;
};

// Whether the ELF file open at `fd` is the job library its name says (`kind`: cudart, cuda_driver, nccl, torch_cpu,
// torch_cuda): its SONAME, when it has one, names that library, and it exports the library's entry point
// (cudaLaunchKernel, cuLaunchKernel, ncclAllReduce, a function of torch's at:: namespace). A file only named so (a
// renamed libz) is not.
bool is_job_library(int fd, trace::LibraryKind kind);

// Where a process runs, as its cgroup path says (cgroup v2 "0::/..." line, or the v1 lines).
struct CgroupLabels {
  std::string cgroup;        // the v2 path ("" when none)
  std::string container_id;  // 64-hex id of docker, containerd (cri-containerd-), cri-o (crio-), podman (libpod-)
  std::string pod_uid;       // Kubernetes pod UID (kubepods...-pod<uid>.slice or /kubepods/.../pod<uid>/), dashes
};
CgroupLabels parse_cgroup_labels(std::string_view proc_pid_cgroup);

// Library families that make a process a job.
enum JobLibrary : unsigned { kJobCuda = 1, kJobNccl = 2, kJobTorch = 4 };
unsigned job_library_mask(const std::vector<std::string>& names);  // "cuda", "nccl", "torch"

struct JobProcess {
  uint32_t pid = 0, ppid = 0;
  uint64_t start_ticks = 0;  // with pid, the identity of a process (pids are reused)
  std::string comm;
  unsigned libraries = 0;
  std::string rank;  // RANK from its environment, "" when not set
};

struct Job {
  std::string command;  // the leader's command line, arguments joined by spaces
  // "<leader pid>-<leader start ticks>": unique on the node for its uptime, and stable when the leader renames
  // itself (torchrun's agent becomes "pt_elastic"): the comm is only in the name.
  std::string id;
  std::string name;  // "<comm>-<leader pid>": the label
  uint32_t leader = 0;
  uint32_t uid = 0;  // whose job it is: the real user id of its leader (of its first rank under a launcher that maps
                    // no job library)
  std::map<uint32_t, JobProcess> processes;  // by pid; the leader included
  CgroupLabels labels;                       // the leader's
  unsigned libraries = 0;                    // of all its processes
};

// The jobs of `found` whose processes that map a job library are all processes of `traced` (same pid and start;
// a launcher that maps none, such as a subreaper that adopted them, may lead them): what is left of a traced job
// whose leader has exited while some of its processes live on (ranks outliving their launcher for a moment as it
// stops them, or for good). They are still that job, not new ones to trace.
std::set<std::string> remnants_of(const Job& traced, const std::map<std::string, Job>& found);

// Scans /proc. Maps are read again only for processes whose mapped size (/proc/PID/statm) changed since the
// last scan, so an idle node costs one small read per process per scan; each mapped file's ELF is read once (by
// device, inode, size and modification time), however many processes map it.
class JobScanner {
 public:
  explicit JobScanner(unsigned library_mask, std::string proc_root = "/proc");
  // The jobs now, by id. The agent's own process is never one.
  std::map<std::string, Job> scan();
  size_t processes_seen() const { return seen_.size(); }

 private:
  struct Seen {
    uint64_t start_ticks = 0;
    uint64_t mapped_pages = UINT64_MAX;
    unsigned libraries = 0;
    bool kernel_thread = false;
    std::string rank;
    bool multi_rank = false;  // RANK set and WORLD_SIZE >= 2: a launcher without the libraries may lead it
    std::string comm;         // at the last scan
    int64_t maps_read_ns = 0;  // when its maps were last read (monotonic)
  };
  // The job libraries (JobLibrary bits within mask_) that the process at `dir` maps, as its maps text says and
  // the mapped files' ELF confirms.
  unsigned libraries_of(const std::string& dir, const std::string& maps_text);
  bool verified(const std::string& dir, const trace::MapEntry& e, trace::LibraryKind kind);

  unsigned mask_;
  std::string root_;
  std::map<uint32_t, Seen> seen_;
  // is_job_library's answers by file identity: device, inode, size, modification time (ns) and the kind asked.
  std::map<std::tuple<uint64_t, uint64_t, int64_t, int64_t, int>, bool> verified_;
};

}  // namespace stackscope::agent
