// Pure parsers for the kernel's telemetry files: text in, values out, no I/O, no allocation in steady state
// (outputs are cleared and refilled, string_views point into the input text). A field that cannot be read is
// skipped and reported in the ParseReport; a value is never guessed.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "sample/procfs_file.h"

namespace stackscope::procfs {

// ---- /proc/stat
// Columns of a "cpu" line that the sampler keeps (guest/guest_nice are already inside user/nice).
inline constexpr std::array<std::string_view, 8> kCpuTimeFields = {"user", "nice",    "system",  "idle",
                                                                   "iowait", "irq", "softirq", "steal"};
struct CpuTimesRow {
  std::string_view label;  // "cpu" (all CPUs) or "cpu3"
  std::array<uint64_t, 8> jiffies{};
  uint8_t present = 0;  // bit i set when column i was read
};
struct ProcStat {
  std::vector<CpuTimesRow> cpus;
  std::optional<uint64_t> ctxt, intr, processes, procs_running, procs_blocked;
};
ParseReport parse_proc_stat(std::string_view text, ProcStat& out);

// ---- /proc/loadavg: "0.31 0.24 0.12 1/84 7757"
struct LoadAvg {
  std::optional<double> load1, load5, load15;
  std::optional<uint64_t> runnable, threads;
};
ParseReport parse_loadavg(std::string_view text, LoadAvg& out);

// ---- "Key: value [kB]" (/proc/meminfo) and "key value" (/proc/vmstat, cgroup cpu.stat and memory.stat)
struct KeyValue {
  std::string_view key;
  uint64_t value = 0;
  bool scaled_kb = false;  // meminfo: the line said "kB" and value is now bytes
};
// Values with a "kB" unit are converted to bytes.
ParseReport parse_meminfo(std::string_view text, std::vector<KeyValue>& out);
ParseReport parse_flat_keyed(std::string_view text, std::vector<KeyValue>& out);

// ---- /proc/pressure/{cpu,memory,io}: "some avg10=0.31 avg60=1.97 avg300=1.54 total=11591136"
struct PressureLine {
  std::string_view kind;  // "some" or "full"
  std::optional<double> avg10, avg60, avg300;  // percent
  std::optional<uint64_t> total;               // microseconds stalled, cumulative
};
ParseReport parse_pressure(std::string_view text, std::vector<PressureLine>& out);

// ---- /proc/net/dev
inline constexpr std::array<std::string_view, 16> kNetDevFields = {
    "rx.bytes", "rx.packets", "rx.errs", "rx.drop", "rx.fifo", "rx.frame", "rx.compressed", "rx.multicast",
    "tx.bytes", "tx.packets", "tx.errs", "tx.drop", "tx.fifo", "tx.colls", "tx.carrier", "tx.compressed"};
struct NetDevRow {
  std::string_view iface;
  std::array<uint64_t, 16> values{};
  uint16_t present = 0;
};
ParseReport parse_net_dev(std::string_view text, std::vector<NetDevRow>& out);

// ---- /proc/net/snmp and /proc/net/netstat: pairs of "Group: names..." / "Group: values..." lines
struct ProtoValue {
  std::string_view group;  // "Tcp", "TcpExt"...
  std::string_view name;   // "RetransSegs"
  int64_t value = 0;       // signed: Tcp MaxConn is -1
};
ParseReport parse_net_snmp(std::string_view text, std::vector<ProtoValue>& out);

// ---- /proc/diskstats: "major minor name" then 11 (<4.18), 15 (4.18+) or 17 (5.5+) columns
inline constexpr std::array<std::string_view, 17> kDiskFields = {
    "reads",         "reads_merged",     "sectors_read",   "read_time",       "writes",      "writes_merged",
    "sectors_written", "write_time",     "io_in_progress", "io_time",         "io_weighted_time",
    "discards",      "discards_merged",  "sectors_discarded", "discard_time", "flushes",     "flush_time"};
struct DiskRow {
  uint32_t major = 0, minor = 0;
  std::string_view name;
  std::array<uint64_t, 17> values{};
  uint32_t present = 0;
};
ParseReport parse_diskstats(std::string_view text, std::vector<DiskRow>& out);

// ---- /proc/interrupts and /proc/softirqs: a header of CPU names, then "LABEL: count per CPU [description]"
struct IrqRow {
  std::string_view label;        // "24", "LOC", "NET_RX"
  std::string_view description;  // "IO-APIC 5-edge ACPI:Ged" (interrupts only)
  size_t first = 0;              // index of its first count in Interrupts::counts
  uint32_t n = 0;                // counts in this row (fewer than CPUs for ERR/MIS)
};
struct Interrupts {
  std::vector<int> cpus;  // CPU numbers of the columns, from the header
  std::vector<IrqRow> rows;
  std::vector<uint64_t> counts;
};
ParseReport parse_interrupts(std::string_view text, Interrupts& out);

// ---- cgroup v2 io.stat: "254:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0", summed over devices
ParseReport parse_cgroup_io_stat(std::string_view text, std::vector<KeyValue>& out);

// ---- perf_event read() with PERF_FORMAT_GROUP | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING
struct PerfGroupRead {
  uint64_t time_enabled = 0, time_running = 0;
  std::vector<uint64_t> values;
};
ParseReport parse_perf_group_read(std::span<const uint8_t> data, PerfGroupRead& out);

// ---- /proc/self/mountinfo: the mount point of the cgroup v2 hierarchy (nullopt when none)
std::optional<std::string_view> find_cgroup2_mount(std::string_view mountinfo);

// ---- one number in a sysfs attribute ("45000\n"); nullopt for anything else
std::optional<int64_t> parse_sysfs_int(std::string_view text);

// ---- /proc/[pid]/stat: "4242 (my prog) R 1 ... utime stime ... num_threads 0 starttime ..."
// The name sits in parentheses and may itself hold spaces and ')': the fields start after the LAST ')'.
struct PidStat {
  uint32_t pid = 0;
  std::string_view comm;     // as the kernel has it (at most 15 bytes), without the parentheses
  char state = '?';
  uint32_t ppid = 0;
  uint64_t utime = 0, stime = 0;  // clock ticks (sysconf(_SC_CLK_TCK)), every thread of the process together
  uint64_t num_threads = 0;
  uint64_t start_time = 0;   // clock ticks after boot: with pid, the identity of a process (pids are reused)
};
ParseReport parse_pid_stat(std::string_view text, PidStat& out);

// ---- /proc/[pid]/task/[tid]/schedstat: "on-cpu-ns run-queue-wait-ns timeslices"; the wait, nullopt if unreadable
std::optional<uint64_t> parse_schedstat_run_delay(std::string_view text);
// The first field of the same: ns the task ran on a CPU (exact, where stat's utime+stime are clock ticks).
std::optional<uint64_t> parse_schedstat_on_cpu(std::string_view text);

// A process name fit for a series' device: control characters (a name is any 15 bytes) become '?', invalid UTF-8
// U+FFFD (model/text.h); "?" for empty.
std::string printable_comm(std::string_view comm);

}  // namespace stackscope::procfs
