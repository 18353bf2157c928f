// stackscope record: runs the collectors of the chosen layers into one recording file, for a duration,
// for the life of a traced PID, or for the life of a command started as a child.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include <fmt/format.h>

#include "cli/duration_option.h"
#include "online/collectors.h"
#include "cli/crash_report.h"
#include "online/online_detector.h"
#include "cli/registry.h"
#include "analyze/reveal/windows.h"
#include "model/clock.h"
#include "model/process.h"
#include "sample/host_info.h"
#include "sample/self_cpu.h"
#include "store/command_redaction.h"
#include "store/output_file.h"
#include "store/recording_reader.h"
#include "store/recording_writer.h"
#include "store/sqlite_db.h"

namespace stackscope::cli {
namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal.store(sig); }

struct RecordOptions {
  std::string out;
  double duration_s = 0;  // 0: until the command or PID exits, or a signal
  int interval_ms = 100;
  std::string layers = "all";
  int pid = 0;
  bool all_processes = false;
  bool quiet = false;
  std::string python_mode = "auto";
  std::string python_duty = "1s/10s";
  int python_sample_hz = 99;
  std::string python_offcpu_min = "200us";
  bool print_python_offsets = false;
  std::vector<std::string> torch_ops;
  double budget_pct = 1.0;
  std::string budget_period;  // MIN[:MAX]
  std::string detail = "budgeted";
  std::vector<std::string> command;
  bool detect = false;      // --detect: the incident engine while recording (online/online_detector.h)
  std::string detect_log;   // --detect-log FILE: its JSON lines ("-": stderr)
  double detect_horizon_s = 1800;  // hidden --detect-horizon: windows the engine looks back over
  bool force = false;       // --force: replace an existing recording (once the new one ends)
  bool keep_cmdline = false;  // --keep-cmdline: store the command line without redacting secrets
  std::string file_mode = "0600";  // --mode: the recording's permissions
};

std::string default_out_name() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "stackscope-%Y%m%d-%H%M%S.sdb", std::localtime(&t));
  return buf;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// Starts CMD stopped at a gate so that tracers can be told its PID before it runs any code.
struct Child {
  pid_t pid = -1;
  int gate_fd = -1;   // write a byte to let it exec
  int error_fd = -1;  // carries errno if exec fails (closed on exec otherwise)
};

Child spawn_gated(const std::vector<std::string>& cmd) {
  int gate[2], err[2];
  if (::pipe2(gate, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  // argv is built before fork: the child of a multi-threaded process may only do async-signal-safe work.
  std::vector<char*> argv;
  for (auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(gate[1]);
    ::close(err[0]);
    char c;
    if (::read(gate[0], &c, 1) != 1) _exit(127);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    ::execvp(argv[0], argv.data());
    int e = errno;
    (void)!::write(err[1], &e, sizeof e);
    _exit(127);
  }
  ::close(gate[0]);
  ::close(err[1]);
  return {pid, gate[1], err[0]};
}

int exit_status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// "250ms", "1s", "1.5s" -> milliseconds; throws std::invalid_argument.
int parse_duration_ms(const std::string& text, const std::string& what) {
  const auto ns = analyze::parse_duration_ns(text);
  if (!ns || *ns < 1'000'000 || *ns > 3'600'000'000'000LL)
    throw std::invalid_argument(what + ": '" + text + "' is not a duration like 500ms or 2s (1 ms to 1 h)");
  return static_cast<int>(*ns / 1'000'000);
}

// --mode: octal permissions of the recording, at most rw for the group and none for others' writing.
mode_t parse_file_mode(const std::string& text) {
  size_t used = 0;
  unsigned long m = 0;
  try {
    m = std::stoul(text, &used, 8);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || m > 0777 || (m & 0600) != 0600 || (m & 0133) != 0)
    throw std::invalid_argument("--mode: '" + text + "' is not an octal mode with rw for the owner and no write or "
                                "execute for others (e.g. 0600, 0640, 0644)");
  return static_cast<mode_t>(m);
}

// --python-duty ON/PERIOD ("1s/10s") or "always"; {0, 0} for always.
std::pair<int, int> parse_python_duty(const std::string& text) {
  if (text == "always") return {0, 0};
  auto slash = text.find('/');
  if (slash == std::string::npos)
    throw std::invalid_argument("--python-duty: '" + text + "' is not ON/PERIOD (like 1s/10s) or 'always'");
  int on = parse_duration_ms(text.substr(0, slash), "--python-duty");
  int period = parse_duration_ms(text.substr(slash + 1), "--python-duty");
  if (on >= period) throw std::invalid_argument("--python-duty: the watched time must be shorter than the period");
  return {on, period};
}

// The folder of a path, as the user named it ("." for a bare file name).
std::string folder_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string no_space_message(const std::string& out) {
  return fmt::format("no space left on {}: free some space or choose another -o", folder_of(out));
}

// A record that never started (a command that cannot run, a full disk, a refused --detect-log) leaves nothing it
// created: the recording (and its -wal, -shm, -reserve) and a --detect-log it created, still empty. What existed
// before stays as it was.
struct UnstartedCleanup {
  OutputFile& out;
  std::string created_log{};
  bool started = false;
  ~UnstartedCleanup() {
    if (started) return;
    out.discard();
    struct stat st{};
    if (!created_log.empty() && ::lstat(created_log.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
      ::unlink(created_log.c_str());
  }
};

// Detaches the probes once the recording is closed. A family's probes of one library are one uprobe_multi link,
// so this takes well under a second (docs/benchmarks/probe-cost.md); the progress line is for kernels without
// uprobe_multi, where each probe is its own link and one RCU wait.
void release_collectors(const std::vector<Collector*>& running, const std::string& out, bool quiet, bool tty) {
  for (auto* c : running)
    c->release([&, last = monotonic_ns()](size_t done, size_t total) mutable {
      int64_t now = monotonic_ns();
      if (quiet || now - last < (tty ? 1'000'000'000 : 5'000'000'000LL)) return;
      last = now;
      std::string line = fmt::format("stackscope: {} is safe; detaching probes {}/{}", out, done, total);
      std::cerr << (tty ? "\r\033[K" : "") << line << (tty && done < total ? "" : "\n") << std::flush;
    });
}

int run_record(const RecordOptions& opt) {
  const int64_t started_ns = monotonic_ns();  // the recorder's own cost is reported over its whole life
  if (opt.print_python_offsets) {  // for eval/tracing/python_offsets.py
    std::cout << online::python_offsets_json();
    return 0;
  }
  if (opt.interval_ms < 1 || opt.interval_ms > 60'000)
    throw std::invalid_argument("--interval must be between 1 and 60000 ms");
  // At most ~31 years: seconds x 1e9 must stay inside int64 nanoseconds (1e10 overflowed and stopped at once).
  if (!(opt.duration_s >= 0 && opt.duration_s <= 1e9))
    throw std::invalid_argument("--duration must be between 0 and 1e9 seconds");
  if (opt.pid > 0 && !opt.command.empty()) throw std::invalid_argument("give either --pid or -- CMD, not both");
  if (opt.pid > 0 && !process_exists(static_cast<uint32_t>(opt.pid)))
    throw std::invalid_argument(fmt::format("--pid {}: no such process", opt.pid));

  auto [duty_on_ms, duty_period_ms] = parse_python_duty(opt.python_duty);
  if (!(opt.budget_pct >= 0 && opt.budget_pct <= 100))
    throw std::invalid_argument("--budget must be a percentage between 0 and 100 (0: no budget)");
  online::TraceDetail detail{opt.detail == "full", opt.budget_pct};
  if (!opt.budget_period.empty()) {  // MIN[:MAX]
    const auto colon = opt.budget_period.find(':');
    detail.budget_period_ms = parse_duration_ms(opt.budget_period.substr(0, colon), "--budget-period");
    detail.budget_max_period_ms = colon == std::string::npos
                                      ? std::max(detail.budget_period_ms, 20'000)
                                      : parse_duration_ms(opt.budget_period.substr(colon + 1), "--budget-period");
    if (detail.budget_max_period_ms < detail.budget_period_ms)
      throw std::invalid_argument("--budget-period: MAX must not be shorter than MIN");
  }
  online::PythonOptions python{opt.python_mode, duty_on_ms, duty_period_ms, opt.python_sample_hz, 0};
  if (opt.python_sample_hz < 1 || opt.python_sample_hz > 10'000)
    throw std::invalid_argument("--python-sample-hz must be between 1 and 10000");
  if (auto ns = analyze::parse_duration_ns(opt.python_offcpu_min); ns && *ns <= 10'000'000'000LL)
    python.offcpu_min_ns = *ns;
  else
    throw std::invalid_argument("--python-offcpu-min: '" + opt.python_offcpu_min +
                                "' is not a duration like 200us or 1ms (up to 10 s)");
  std::vector<Layer> requested = parse_layer_list(opt.layers);
  const bool explicit_layers = opt.layers != "all";
  const bool root = ::geteuid() == 0;
  const online::LayerChoice choice = online::choose_layers(requested);
  const std::vector<Layer>& layers = choice.layers;
  const std::vector<Layer>& need_root = choice.need_root;
  const std::vector<Layer>& unbuilt = choice.unbuilt;
  const auto names = online::layer_names;
  if (!need_root.empty())
    std::cerr << "stackscope: layers " << names(need_root)
              << " need root (CAP_BPF and CAP_PERFMON for eBPF uprobes); recording " << (layers.empty() ? "nothing else" : names(layers)) << "\n";
  if (!unbuilt.empty() && explicit_layers)
    std::cerr << "stackscope: layers " << names(unbuilt) << " are not available in this build\n";
  if (layers.empty()) throw std::invalid_argument("no layer can be recorded here");

  std::string out = opt.out.empty() ? default_out_name() : opt.out;
  online::raise_memlock_limit();
  // store/output_file.h: a new path is written in place (kill -9 keeps it) and locked; an existing one only with
  // --force, written beside it and renamed over it when the recording ends, so a failed start leaves it intact.
  OutputFile out_file(out, {.inputs = {},
                            .mode = parse_file_mode(opt.file_mode),
                            .replace = opt.force,
                            .in_place_when_new = true,
                            .lock = true,
                            .sqlite = true,
                            .keep_unfinished = true,
                            .what = "recording"});
  UnstartedCleanup cleanup{out_file};
  if (!opt.detect_log.empty() && opt.detect_log != "-") {
    check_output_path(opt.detect_log, {out_file.path(), out_file.write_path()}, "--detect-log");
    struct stat st{};
    if (::lstat(opt.detect_log.c_str(), &st) != 0) cleanup.created_log = opt.detect_log;
  }
  std::unique_ptr<RecordingWriter> writer_owner;
  try {
    writer_owner = std::make_unique<RecordingWriter>(out_file.write_path());
  } catch (const sql::SqliteError& e) {
    if (!e.disk_full()) throw;
    std::cerr << "stackscope: " << no_space_message(out) << "\n";
    return 3;
  }
  RecordingWriter& writer = *writer_owner;
  set_crash_note(("the recording so far is in " + out_file.write_path() + " (it opens as it is)").c_str());
  HostInfo host = read_host_info();
  for (const auto& [key, value] : host_meta(host)) writer.set_meta(key, value);
  writer.set_meta("command", join(opt.keep_cmdline ? opt.command : redact_command_line(opt.command), " "));
  nlohmann::json config = {{"layers", names(layers)}, {"interval_ms", opt.interval_ms},
                           {"duration_s", opt.duration_s}, {"pid", opt.pid}, {"all", opt.all_processes},
                           {"python_mode", opt.python_mode}, {"python_duty", opt.python_duty},
                           {"python_sample_hz", opt.python_sample_hz}, {"python_offcpu_min", opt.python_offcpu_min},
                           {"detail", opt.detail}, {"budget_pct", opt.budget_pct}, {"root", root}};
  writer.set_meta("config", config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);

  Child child;
  if (!opt.command.empty()) child = spawn_gated(opt.command);

  CollectorOptions copt;
  copt.interval_ms = opt.interval_ms;
  copt.host = host.hostname;
  copt.all_processes = opt.all_processes;
  if (opt.pid > 0) copt.pids.push_back(static_cast<uint32_t>(opt.pid));
  if (child.pid > 0) copt.pids.push_back(static_cast<uint32_t>(child.pid));
  copt.torch_ops = opt.torch_ops;
  std::unique_ptr<online::OnlineDetector> detector;
  if (opt.detect || !opt.detect_log.empty()) {
    online::OnlineDetectOptions dopt{.horizon_s = opt.detect_horizon_s, .log_path = opt.detect_log, .host = host.hostname};
    detector = std::make_unique<online::OnlineDetector>(writer, std::set<uint32_t>(copt.pids.begin(), copt.pids.end()), dopt);
  }
  TelemetrySink& sink = detector ? static_cast<TelemetrySink&>(*detector) : writer;
  auto collectors = online::make_collectors(layers, python, detail);
  std::vector<Collector*> running;
  for (auto& c : collectors) {
    CollectorStatus st = c->start(sink, copt);
    // Collectors put their own notes into the recording; the operator sees the message once here.
    if (!st.message.empty()) std::cerr << "stackscope: " << c->name() << ": " << st.message << "\n";
    if (st.running) running.push_back(c.get());
  }
  if (child.pid > 0) {
    writer.set_meta("pid", std::to_string(child.pid));
    (void)!::write(child.gate_fd, "g", 1);
    ::close(child.gate_fd);
    int e = 0;
    if (::read(child.error_fd, &e, sizeof e) == sizeof e) {
      ::waitpid(child.pid, nullptr, 0);
      for (auto* c : running) c->stop();
      writer.close();
      for (auto* c : running) c->release();
      out_file.discard();  // nothing was recorded: an existing file stays as it was
      std::cerr << "stackscope: cannot run '" << opt.command[0] << "': " << std::strerror(e) << "\n";
      return 127;
    }
    ::close(child.error_fd);
  } else if (opt.pid > 0) {
    writer.set_meta("pid", std::to_string(opt.pid));
  }
  cleanup.started = true;

  const int64_t t0 = monotonic_ns();
  const bool tty = ::isatty(STDERR_FILENO);
  int64_t last_progress = t0;
  RecordingWriterStats last = writer.stats();
  int child_status = -1;
  bool stopped_recording = false;
  bool released = false;  // probes detached (release_collectors ran)
  std::string stop_reason;
  auto summary = [&] {
    auto s = writer.stats();
    bool failed = writer.failed();
    if (!opt.quiet || failed)
      std::cerr << fmt::format("stackscope: {}: {} events, {} samples of {} series, {} dropped -> {}\n", stop_reason,
                               s.flushed_events, s.flushed_samples, s.series, s.dropped, out);
    if (failed && out_file.in_place() && (s.flushed_events || s.flushed_samples))
      std::cerr << "stackscope: recording stopped early; " << out << " keeps everything written before the failure\n";
  };
  auto stop_collectors = [&](const std::string& why) {
    if (stopped_recording) return;
    stopped_recording = true;
    stop_reason = why;
    if (tty && !opt.quiet) std::cerr << "\r\033[K";
    // The recorder's own cost, by thread (ss-nvml, ss-drain...), read while its threads still run: stored, so a
    // recording made elsewhere says where the tracing cost went.
    const SelfCpu self_cpu = read_self_cpu();
    const double wall_s = static_cast<double>(monotonic_ns() - started_ns) / 1e9;
    nlohmann::json cost{{"cpu_s", self_cpu.cpu_s}, {"wall_s", wall_s}, {"exited_threads_cpu_s", self_cpu.exited_cpu_s()}};
    for (const auto& t : self_cpu.threads) cost["threads"][t.name] = t.cpu_s;
    writer.set_meta("recorder_cpu", cost.dump());
    if (!opt.quiet)
      std::cerr << fmt::format("stackscope: recorder CPU {} over {:.1f} s, {:.1f} % of a core\n",
                               describe_self_cpu(self_cpu), wall_s, wall_s > 0 ? 100 * self_cpu.cpu_s / wall_s : 0.0);
    // The recording is finished and closed before any probe is detached (release_collectors below).
    for (auto* c : running) c->stop();
    writer.close();
    if (detector) try {
        store_findings(out_file.write_path(), "incident-online", detector->finish());
      } catch (const std::exception& e) {
        std::cerr << "stackscope: --detect: incidents not stored: " << e.what() << "\n";
      }
    summary();
  };
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    int64_t now = monotonic_ns();
    if (child.pid > 0 && child_status < 0) {
      int status;
      if (::waitpid(child.pid, &status, WNOHANG) == child.pid) child_status = exit_status_of(status);
    }
    if (int sig = g_signal.exchange(0)) {
      if (child.pid > 0 && child_status < 0) {
        ::kill(child.pid, sig);  // the job gets what the recorder got; the recording ends with it
        if (!stopped_recording) std::cerr << "\nstackscope: " << strsignal(sig) << ": passed to the job\n";
      } else {
        stop_collectors(std::string("signal ") + strsignal(sig));
      }
    }
    if (!stopped_recording && writer.failed())
      stop_collectors("write failed: " + writer.error());
    if (!stopped_recording && opt.duration_s > 0 && now - t0 >= static_cast<int64_t>(opt.duration_s * 1e9))
      stop_collectors("duration reached");
    if (!stopped_recording && child.pid > 0 && child_status >= 0)
      stop_collectors(fmt::format("command exited with status {}", child_status));
    if (!stopped_recording && opt.pid > 0 && !process_exists(static_cast<uint32_t>(opt.pid)))
      stop_collectors(fmt::format("pid {} exited", opt.pid));
    if (!opt.quiet && !stopped_recording && now - last_progress >= (tty ? 1'000'000'000 : 5'000'000'000LL)) {
      auto s = writer.stats();
      double dt = (now - last_progress) / 1e9;
      std::string line = fmt::format("recording {:.0f}s  events {:.0f}/s  samples {:.0f}/s  series {}  drops {}",
                                     (now - t0) / 1e9, (s.events - last.events) / dt,
                                     (s.samples - last.samples) / dt, s.series, s.dropped);
      std::cerr << (tty ? "\r\033[K" : "") << line << (tty ? "" : "\n") << std::flush;
      last = s;
      last_progress = now;
    }
    if (stopped_recording && (child.pid <= 0 || child_status >= 0)) break;
    if (stopped_recording && !released) {  // --duration (or a write failure) ended it; the command goes on
      release_collectors(running, out, opt.quiet, tty);
      released = true;
    }
  }
  if (!released) release_collectors(running, out, opt.quiet, tty);
  const RecordingWriterStats written = writer.stats();
  if (writer.failed() && written.flushed_events == 0 && written.flushed_samples == 0) {
    out_file.discard();  // nothing recorded: no empty recording left, an existing one stays as it was
    std::cerr << "stackscope: nothing was recorded"
              << (out_file.in_place() ? "" : "; " + out + " is as it was") << ": "
              << (writer.disk_full() ? no_space_message(out) : writer.error()) << "\n";
  } else if (writer.failed() && !out_file.in_place()) {
    // --force: a recording cut short by a failed write never replaces the one at the path; it stays beside it.
    std::cerr << fmt::format("stackscope: {} is as it was (a recording whose writing failed does not replace it); "
                             "what was recorded is in {}\n",
                             out, out_file.write_path());
  } else {
    out_file.commit();
  }
  // A failed write (a full disk) is the recorder's status 3, with or without -- CMD (as --help says); the
  // job's own status is in the summary line above.
  if (writer.failed()) {
    if (child.pid > 0) std::cerr << "stackscope: the command exited with status " << child_status << "\n";
    return 3;
  }
  return child.pid > 0 ? child_status : 0;
}

RegisterCommand reg("record", 10, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<RecordOptions>();
  auto* cmd = app.add_subcommand("record", "Record telemetry and traces of a job (or of the host) into a file");
  cmd->add_option("-o,--out", opt->out, "Recording file (default stackscope-DATE-TIME.sdb); an existing one is refused");
  cmd->add_flag("--force", opt->force,
                "Replace an existing recording file: the new one is written beside it (FILE.partial-XXXXXX) and "
                "renamed over it when the recording ends; if writing fails (disk full) the old one stays and the new "
                "one is left beside it; a recording another recorder is writing is never replaced");
  cmd->add_option("-d,--duration", opt->duration_s,
                  "How long to record: seconds, or a duration such as 90s, 10m, 2h (default: until the job exits or "
                  "Ctrl-C)")
      ->transform(duration_seconds());
  cmd->add_option("-i,--interval", opt->interval_ms, "Sampling interval in ms for host and GPU series (default 100)");
  cmd->add_option("-l,--layers", opt->layers,
                  "Layers: cuda,nccl,torch,python,kernel,nvml,host or all (default all the machine supports)");
  auto* pid = cmd->add_option("-p,--pid", opt->pid, "Trace this running process")
                  ->check(CLI::Range(1, 4'194'304));  // pid_max's ceiling; 0 and negatives are no process
  cmd->add_flag("--all", opt->all_processes, "Trace every process that maps the traced libraries")->excludes(pid);
  cmd->add_flag("-q,--quiet", opt->quiet, "No progress line");
  cmd->add_option("--torch-ops", opt->torch_ops,
                  "PyTorch operators to probe, comma-separated operator names (sum: every overload, as torch.profiler "
                  "counts them), at::_ops struct names (sum_dim_IntList: that overload) or globs (\"mm,addmm,*_backward\"); "
                  "default: a list of common ones. Every operator is two uprobes: fewer cost less and detach faster")
      ->delimiter(',');
  cmd->add_option("--python-mode", opt->python_mode,
                  "CPython: stack (sample Python stacks from eBPF: on CPU, and where threads block; 3.11, 3.12), "
                  "usdt (function__entry/return probes), capi (time C-API calls: costly), off; auto (default): "
                  "stack for 3.11/3.12, else usdt where the interpreter has the probes")
      ->check(CLI::IsMember({"auto", "stack", "usdt", "capi", "off"}));
  cmd->add_option("--python-sample-hz", opt->python_sample_hz,
                  "Python stack mode: on-CPU samples per second per CPU (default 99)");
  cmd->add_option("--python-offcpu-min", opt->python_offcpu_min,
                  "Python stack mode: shortest blocked time reported with its stack (default 200us)");
  cmd->add_flag("--python-offsets", opt->print_python_offsets,
                "Print the CPython struct offsets of the stack sampler as JSON and exit")
      ->group("");
  cmd->add_option("--python-duty", opt->python_duty,
                  "With --python-mode capi: attach the C-API probes ON of every PERIOD (default 1s/10s: ~10 % of "
                  "their cost; series python.capi.watching marks the watched intervals), or 'always'");
  cmd->add_option("--budget", opt->budget_pct,
                  "Probe cost budget in % of the job's CPU time (default 1): a probe family whose hits would cost more "
                  "is attached for a share of every few seconds (series trace.<family>.watching; the notes give the "
                  "sampling fraction to scale counts by); 0: no budget. Not with --detail full");
  cmd->add_option("--budget-period", opt->budget_period,
                  "MIN[:MAX] (default 5s:20s): a budgeted family is attached for a share of every period, MIN at "
                  "least, longer where its attach/detach toggles would cost more than a quarter of its share; "
                  "MIN:MIN fixes it")
      ->group("");
  cmd->add_option("--detail", opt->detail,
                  "budgeted (default): asynchronous CUDA calls probed at entry only (no duration), torch operators "
                  "counted in the kernel (series torch.op.*), the cost budget applies; full: every call an event "
                  "with its duration, every probe attached throughout (exact counts, higher cost)")
      ->check(CLI::IsMember({"budgeted", "full"}));
  cmd->add_flag("--detect", opt->detect,
                "Find incidents while recording (the engine of `analyze`, every second): a line on stderr as each "
                "opens, changes cause and closes; stored in the recording as findings (detector incident-online)");
  cmd->add_option("--detect-log", opt->detect_log,
                  "With --detect: its incidents as JSON lines, appended to FILE (created 0600; never truncated; "
                  "incident numbers follow those already in it); '-': stderr");
  cmd->add_option("--detect-horizon", opt->detect_horizon_s, "With --detect: seconds of windows it looks back over")
      ->group("");
  cmd->add_flag("--keep-cmdline,--keep-argv", opt->keep_cmdline,
                "Store the command line as given (default: values of secret-looking arguments -- names holding "
                "token, passw, secret, key, credential, auth, cookie or a part pass, pw, pwd; headers such as "
                "'Authorization: Bearer X'; URL passwords; -p/-a/-k/-P/-u of known clients such as mysql, sshpass, "
                "redis-cli, openssl, curl -- are stored as ***; docs/FEATURES.md has the whole rule)");
  cmd->add_option("--mode", opt->file_mode,
                  "Permissions of the recording file (default 0600: only its owner reads it; 0640 shares it with "
                  "the group)");
  cmd->add_option("command", opt->command, "-- CMD ARGS...: run CMD as a child; the recording ends when it exits")
      ->excludes(pid);
  cmd->footer(
      "Examples:\n  stackscope record -o run.sdb -- torchrun --nproc-per-node 2 train.py\n"
      "  stackscope record --pid 1234 --duration 60 --layers cuda,nccl,nvml,host\n"
      "Exit status: the command's own (128+N if killed by signal N); 3 if writing failed (disk full), also with\n"
      "-- CMD (the command's status is then in the summary line); 1 on bad input.");
  cmd->callback([opt, &exit_code] { exit_code = run_record(*opt); });
});

}  // namespace
}  // namespace stackscope::cli
