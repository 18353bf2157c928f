// Which GPU/ML jobs run on this node: processes that map libcuda/libcudart, libnccl or libtorch (read from
// /proc/PID/maps, trace/proc_maps.h), grouped into jobs, with the container and pod they run in (from
// /proc/PID/cgroup) as labels. A job is the topmost such process and every such process below it (a launcher and
// its ranks, e.g. torchrun or torch.multiprocessing), so the ranks of one job are traced and labelled together.
// Ranks (RANK and WORLD_SIZE >= 2 in their environment) whose launcher maps none of the libraries are led by that
// launcher, when it runs in their cgroup: one job of launcher and ranks, as under torchrun.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope::agent {

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
// Which job libraries a maps text maps executable (a bit mask of JobLibrary).
unsigned job_libraries_in_maps(const std::string& maps_text);

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
// last scan, so an idle node costs one small read per process per scan.
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
  unsigned mask_;
  std::string root_;
  std::map<uint32_t, Seen> seen_;
};

}  // namespace stackscope::agent
