// stackscope agent: the node daemon (src/agent). Only wiring: flags into configuration overrides, signals into the
// agent's stop and reload requests. Built into the stackscope-agent executable (it links prometheus-cpp and
// civetweb, which Debian ships as shared libraries only); `stackscope agent` runs that executable.
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <iostream>
#include <map>

#include "agent/agent.h"
#include "agent/agent_config.h"
#include "cli/registry.h"

namespace stackscope::cli {
namespace {

std::atomic<bool> g_stop{false}, g_reload{false};
void on_stop(int) { g_stop.store(true); }
void on_reload(int) { g_reload.store(true); }

struct AgentFlags {
  std::string config;
  std::map<std::string, std::string> flag_values;  // setting -> text, only the flags given
  std::vector<std::string> sets;                   // --set KEY=VALUE
  bool no_detect = false;
  bool list_keys = false;
};

int run_agent(const AgentFlags& f) {
  if (f.list_keys) {
    for (const auto& [k, help] : agent::agent_config_keys()) std::cout << k << "\t" << help << "\n";
    return 0;
  }
  std::map<std::string, std::string> overrides = f.flag_values;
  for (const auto& kv : f.sets) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw std::invalid_argument("--set: '" + kv + "' is not KEY=VALUE");
    overrides[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (f.no_detect) overrides["trace.detect"] = "false";
  ::umask(077);  // segments and incident logs hold command names and call names: the owner's only
  agent::Agent a(f.config, overrides, STACKSCOPE_VERSION);
  struct sigaction sa{};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sa.sa_handler = on_reload;
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a scraper hanging up mid-response
  return a.run(g_stop, g_reload);
}

RegisterCommand reg("agent", 90, [](CLI::App& app, int& exit_code) {
  auto f = std::make_shared<AgentFlags>();
  auto* cmd = app.add_subcommand("agent", "Node daemon: find GPU/ML jobs, trace them, serve Prometheus metrics");
  cmd->add_option("-c,--config", f->config, "TOML configuration file (deploy/agent.toml documents every setting)")
      ->check(CLI::ExistingFile);
  // Each flag is a setting of the file, and wins over it (also after SIGHUP reloads the file).
  auto setting = [&](const char* flag, const char* key, const char* help) {
    cmd->add_option_function<std::string>(flag, [f, key](const std::string& v) { f->flag_values[key] = v; }, help);
  };
  setting("--data-dir", "data_dir", "Directory of the rolling segments (default /var/lib/stackscope)");
  setting("--listen", "listen", "HOST:PORT of /metrics, /healthz, /api/incidents (default 127.0.0.1:9477)");
  setting("--scan-interval", "discovery.scan_interval", "How often /proc is scanned for jobs (default 2s)");
  setting("--max-jobs", "discovery.max_jobs", "Jobs traced at once (default 8)");
  setting("--max-jobs-per-user", "discovery.max_jobs_per_user", "Jobs of one user other than root traced at once (default 4)");
  setting("--layers", "trace.layers", "Layers traced in each job, as record --layers (default all)");
  setting("--budget", "trace.budget_pct", "Probe cost budget in % of a job's CPU time (default 1)");
  setting("--host-interval", "host.interval", "Sampling interval of the node's host and GPU series (default 1s)");
  setting("--segment-duration", "store.segment_duration", "Age at which a segment is closed (default 10m)");
  setting("--segment-size", "store.segment_size", "Size at which a segment is closed (default 256MiB)");
  setting("--retention-size", "store.retention_size", "Total size of segments kept (default 10GiB)");
  setting("--retention-age", "store.retention_age", "Age beyond which segments are deleted (default 7d)");
  setting("--clickhouse-url", "clickhouse.url", "Fleet store: ClickHouse's HTTP interface, http://HOST:8123 (default off)");
  setting("--clickhouse-database", "clickhouse.database", "Fleet store: database of its tables (default stackscope)");
  cmd->add_flag("--no-detect", f->no_detect, "No online incident engine (trace.detect = false)");
  cmd->add_option("--set", f->sets, "Any setting as KEY=VALUE (see --list-settings); repeatable");
  cmd->add_flag("--list-settings", f->list_keys, "Print every setting with its meaning and exit");
  cmd->footer(
      "Signals: SIGHUP reloads the configuration file (flags still win; traced jobs keep their settings until they\n"
      "end); SIGTERM or SIGINT stops: every job's segment is flushed and closed with its incidents, probes detached.\n"
      "Idle node (no job traced): the node's slow GPU readings (energy, memory clock, ECC, NVML field values) and its\n"
      "costlier host families (interrupts, softirqs, perf counters, per-process CPU, vmstat, TCP, cpufreq) are read\n"
      "every 30s (host.idle_gpu_slow_interval, host.idle_host_slow_interval), and a GPU with no running process gets\n"
      "no PCIe throughput or per-process utilization query; a traced job brings the full rates back at once.\n"
      "With http.token_file, /metrics and /api/incidents need \"Authorization: Bearer TOKEN\"; /healthz stays open\n"
      "and answers 503 (store_error) while data_dir cannot be made or segments cannot be written (full disk, below\n"
      "store.min_free); writing resumes on the next scan with room.\n"
      "Exit status: 0; 3 if the store failed (disk full); 1 on a bad configuration.");
  cmd->callback([f, &exit_code] { exit_code = run_agent(*f); });
});

}  // namespace
}  // namespace stackscope::cli
