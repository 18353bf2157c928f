#include "agent/agent_config.h"

// toml++ as a header-only library: the agent then needs no shared library of it at run time.
#define TOML_HEADER_ONLY 1
#include <toml++/toml.h>

#include <pwd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>

#include <fmt/format.h>

#include "agent/job_discovery.h"
#include "analyze/reveal/windows.h"
#include "model/layer.h"

namespace stackscope::agent {
namespace {

int64_t duration_ns(const std::string& key, const std::string& text, int64_t min_ns) {
  auto ns = analyze::parse_duration_ns(text);
  if (!ns || *ns < min_ns)
    throw std::invalid_argument(fmt::format("{}: '{}' is not a duration of at least {} ({})", key, text,
                                            analyze::format_duration(min_ns), analyze::duration_units()));
  return *ns;
}

uint64_t size_bytes(const std::string& key, const std::string& text) {
  uint64_t v = 0;
  if (!parse_size_bytes(text, v) || v == 0)
    throw std::invalid_argument(fmt::format("{}: '{}' is not a size like 256MiB, 10GiB or 500MB", key, text));
  return v;
}

long long integer(const std::string& key, const std::string& text, long long lo, long long hi) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < lo || v > hi)
    throw std::invalid_argument(fmt::format("{}: '{}' is not an integer from {} to {}", key, text, lo, hi));
  return v;
}

double number(const std::string& key, const std::string& text, double lo, double hi) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !(v >= lo && v <= hi))
    throw std::invalid_argument(fmt::format("{}: '{}' is not a number from {} to {}", key, text, lo, hi));
  return v;
}

bool boolean(const std::string& key, const std::string& text) {
  if (text == "true" || text == "1" || text == "yes") return true;
  if (text == "false" || text == "0" || text == "no") return false;
  throw std::invalid_argument(fmt::format("{}: '{}' is not true or false", key, text));
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= text.size()) {
    size_t comma = text.find(',', from);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(from, comma - from);
    if (!item.empty()) out.push_back(item);
    from = comma + 1;
  }
  return out;
}

using Setter = std::function<void(AgentConfig&, const std::string& key, const std::string& value)>;
struct KeySpec {
  std::string help;
  Setter set;
};

const std::map<std::string, KeySpec>& specs() {
  static const std::map<std::string, KeySpec> table = {
      {"data_dir", {"directory of the rolling segments and per-job incident logs",
                    [](AgentConfig& c, const std::string& k, const std::string& v) {
                      if (v.empty()) throw std::invalid_argument(k + ": must not be empty");
                      c.data_dir = v;
                    }}},
      {"listen", {"HOST:PORT of /metrics, /healthz and /api/incidents (default loopback only; port 0: any free)",
                  [](AgentConfig& c, const std::string&, const std::string& v) { c.listen = v; }}},
      {"discovery.scan_interval", {"how often /proc is scanned for new and ended jobs (default 2s)",
                                   [](AgentConfig& c, const std::string& k, const std::string& v) {
                                     c.scan_interval_ns = duration_ns(k, v, 100'000'000);
                                   }}},
      {"discovery.libraries", {"a process mapping one of these (as its ELF says, not its name alone) is a job: cuda, "
                               "nccl, torch (default all three)",
                               [](AgentConfig& c, const std::string& k, const std::string& v) {
                                 auto list = split_list(v);
                                 if (list.empty()) throw std::invalid_argument(k + ": name at least one library");
                                 for (auto& l : list)
                                   if (l != "cuda" && l != "nccl" && l != "torch")
                                     throw std::invalid_argument(k + ": '" + l + "' is not cuda, nccl or torch");
                                 c.job_libraries = list;
                               }}},
      {"discovery.max_jobs", {"jobs traced at once (default 8); more are counted and left alone",
                              [](AgentConfig& c, const std::string& k, const std::string& v) {
                                c.max_jobs = static_cast<int>(integer(k, v, 1, 256));
                              }}},
      {"discovery.max_jobs_per_user",
       {"jobs of one user other than root traced at once (default 4); more are counted and left alone",
        [](AgentConfig& c, const std::string& k, const std::string& v) {
          c.max_jobs_per_user = static_cast<int>(integer(k, v, 1, 256));
        }}},
      {"discovery.users",
       {"only jobs of these users, uids or names of the agent's user database (default: every user's)",
        [](AgentConfig& c, const std::string& k, const std::string& v) {
          std::set<uint32_t> uids;
          for (const auto& u : split_list(v)) {
            if (u.find_first_not_of("0123456789") == std::string::npos) {
              uids.insert(static_cast<uint32_t>(integer(k, u, 0, 4294967294)));
              continue;
            }
            passwd pw{}, *found = nullptr;
            char buf[4096];
            if (::getpwnam_r(u.c_str(), &pw, buf, sizeof buf, &found) != 0 || !found)
              throw std::invalid_argument(k + ": no user '" + u + "' in this system's user database (give its uid)");
            uids.insert(found->pw_uid);
          }
          c.users = std::move(uids);
        }}},
      {"discovery.command_filter",
       {"only jobs whose leader's command line matches this RE2 regular expression, searched anywhere in it (RE2 "
        "syntax: no backreferences or lookaround) (default: every job)",
        [](AgentConfig& c, const std::string& k, const std::string& v) {
          try {
            c.command_matcher = v.empty() ? nullptr : std::make_shared<const CommandFilter>(v);
          } catch (const std::invalid_argument& e) {
            throw std::invalid_argument(k + ": '" + v + "' is not an RE2 regular expression: " + e.what());
          }
          c.command_filter = v;
        }}},
      {"trace.layers", {"layers traced in each job, as record --layers (default all)",
                        [](AgentConfig& c, const std::string&, const std::string& v) {
                          parse_layer_list(v);  // throws on an unknown layer
                          c.layers = v;
                        }}},
      {"trace.interval", {"sampling interval of a job's host and GPU series (default 100ms)",
                          [](AgentConfig& c, const std::string& k, const std::string& v) {
                            c.interval_ms = static_cast<int>(duration_ns(k, v, 1'000'000) / 1'000'000);
                            if (c.interval_ms > 60'000) throw std::invalid_argument(k + ": at most 60s");
                          }}},
      {"trace.budget_pct", {"probe cost budget in % of a job's CPU time, as record --budget (default 1)",
                            [](AgentConfig& c, const std::string& k, const std::string& v) {
                              c.budget_pct = number(k, v, 0, 100);
                            }}},
      {"trace.ring_buffer", {"each probe family's BPF ring buffer, a power of two from 64KiB to 256MiB (default 2MiB)",
                             [](AgentConfig& c, const std::string& k, const std::string& v) {
                               const uint64_t b = size_bytes(k, v);
                               if (b < 65536 || b > (256u << 20) || (b & (b - 1)) != 0)
                                 throw std::invalid_argument(k + ": '" + v + "' is not a power of two from 64KiB to 256MiB");
                               c.ringbuf_bytes = static_cast<uint32_t>(b);
                             }}},
      {"trace.detect", {"run the online incident engine on each job (default true)",
                        [](AgentConfig& c, const std::string& k, const std::string& v) { c.detect = boolean(k, v); }}},
      {"trace.detect_horizon", {"time the incident engine looks back over (default 30m)",
                                [](AgentConfig& c, const std::string& k, const std::string& v) {
                                  c.detect_horizon_s = static_cast<double>(duration_ns(k, v, 10'000'000'000)) * 1e-9;
                                }}},
      {"host.interval", {"sampling interval of the node's own host and GPU series (default 1s)",
                         [](AgentConfig& c, const std::string& k, const std::string& v) {
                           c.host_interval_ms = static_cast<int>(duration_ns(k, v, 10'000'000) / 1'000'000);
                           if (c.host_interval_ms > 60'000) throw std::invalid_argument(k + ": at most 60s");
                         }}},
      {"host.idle_gpu_slow_interval",
       {"on an idle node (no job traced): energy, memory clock, ECC and NVML field values (PCIe replays, NVLink, PCIe "
        "byte counters) at most this often (default 30s; 1s while a job is traced); utilisation, memory, power, "
        "temperature, clocks and throttling stay at host.interval; a GPU without processes gets no PCIe throughput or "
        "process-utilization query",
        [](AgentConfig& c, const std::string& k, const std::string& v) {
          c.host_idle_gpu_slow_interval_ms = static_cast<int>(duration_ns(k, v, 100'000'000) / 1'000'000);
          if (c.host_idle_gpu_slow_interval_ms > 3'600'000) throw std::invalid_argument(k + ": at most 1h");
        }}},
      {"host.idle_host_slow_interval",
       {"on an idle node (no job traced): the host families interrupts, softirqs, perf counters, per-process CPU, "
        "vmstat, TCP counters and cpufreq at most this often (default 30s; host.interval while a job is traced)",
        [](AgentConfig& c, const std::string& k, const std::string& v) {
          c.host_idle_host_slow_interval_ms = static_cast<int>(duration_ns(k, v, 100'000'000) / 1'000'000);
          if (c.host_idle_host_slow_interval_ms > 3'600'000) throw std::invalid_argument(k + ": at most 1h");
        }}},
      {"host.layers", {"the node's own samplers: host, nvml, both or none (default host,nvml)",
                       [](AgentConfig& c, const std::string& k, const std::string& v) {
                         for (auto& l : split_list(v))
                           if (l != "host" && l != "nvml") throw std::invalid_argument(k + ": '" + l + "' is not host or nvml");
                         c.host_layers = v;
                       }}},
      {"host.max_series", {"host and GPU series exported to /metrics at most (default 4000)",
                           [](AgentConfig& c, const std::string& k, const std::string& v) {
                             c.max_host_series = static_cast<size_t>(integer(k, v, 0, 1'000'000));
                           }}},
      {"store.segment_duration", {"a segment is closed and a new one begun after this long (default 10m)",
                                  [](AgentConfig& c, const std::string& k, const std::string& v) {
                                    c.segment_duration_ns = duration_ns(k, v, 1'000'000'000);
                                  }}},
      {"store.segment_size", {"...or once it is this big (default 256MiB)",
                              [](AgentConfig& c, const std::string& k, const std::string& v) {
                                c.segment_size_bytes = size_bytes(k, v);
                              }}},
      {"store.retention_size", {"closed segments are deleted, oldest first, beyond this total (default 10GiB)",
                                [](AgentConfig& c, const std::string& k, const std::string& v) {
                                  c.retention_size_bytes = size_bytes(k, v);
                                }}},
      {"store.retention_age", {"...and once older than this (default 7d)",
                               [](AgentConfig& c, const std::string& k, const std::string& v) {
                                 c.retention_age_ns = duration_ns(k, v, 1'000'000'000);
                               }}},
      {"store.min_free", {"free space kept on data_dir's file system, a size or a percentage (\"10%\"): below it the "
                          "oldest segments are deleted, then writing stops (default 1GiB or 5%, whichever is smaller; "
                          "0: none)",
                          [](AgentConfig& c, const std::string& k, const std::string& v) {
                            c.min_free_bytes = 0;
                            c.min_free_ratio = 0;
                            if (v == "0") return;
                            uint64_t bytes = 0;
                            if (!v.empty() && v.back() == '%')
                              c.min_free_ratio = number(k, v.substr(0, v.size() - 1), 0, 50) / 100;
                            else if (parse_size_bytes(v, bytes) && bytes > 0)
                              c.min_free_bytes = bytes;
                            else
                              throw std::invalid_argument(k + ": '" + v + "' is not a size (1GiB), a percentage "
                                                          "of the file system (5%) or 0");
                          }}},
      {"api.max_incidents", {"incidents kept for /api/incidents, newest (default 1000)",
                             [](AgentConfig& c, const std::string& k, const std::string& v) {
                               c.max_incidents = static_cast<size_t>(integer(k, v, 1, 1'000'000));
                             }}},
      {"http.token_file", {"file (owner-only, e.g. mode 600) holding a bearer token that /metrics and /api/incidents "
                           "then need as \"Authorization: Bearer TOKEN\"; /healthz stays open (default \"\": none)",
                           [](AgentConfig& c, const std::string&, const std::string& v) { c.http_token_file = v; }}},
      {"clickhouse.url", {"the fleet store's HTTP interface, http://HOST:8123 (default \"\": off)",
                          [](AgentConfig& c, const std::string& k, const std::string& v) {
                            if (!v.empty() && v.rfind("http://", 0) != 0 && v.rfind("https://", 0) != 0)
                              throw std::invalid_argument(k + ": '" + v + "' is not an http:// or https:// URL");
                            c.clickhouse.url = v;
                          }}},
      {"clickhouse.database", {"database of the fleet store's tables (default stackscope)",
                               [](AgentConfig& c, const std::string& k, const std::string& v) {
                                 if (v.empty()) throw std::invalid_argument(k + ": must not be empty");
                                 c.clickhouse.database = v;
                               }}},
      {"clickhouse.batch_rows", {"rows of one table sent in one batch at most (default 10000)",
                                 [](AgentConfig& c, const std::string& k, const std::string& v) {
                                   c.clickhouse.batch_rows = static_cast<size_t>(integer(k, v, 1, 1'000'000));
                                 }}},
      {"clickhouse.batch_interval", {"a batch is cut once its oldest row is this old (default 5s)",
                                     [](AgentConfig& c, const std::string& k, const std::string& v) {
                                       c.clickhouse.batch_interval_ns = duration_ns(k, v, 100'000'000);
                                     }}},
      {"clickhouse.aggregate_interval", {"interval of the per-job, per-rank, per-layer event counts (default 10s)",
                                         [](AgentConfig& c, const std::string& k, const std::string& v) {
                                           c.clickhouse.aggregate_interval_ns = duration_ns(k, v, 1'000'000'000);
                                         }}},
      {"clickhouse.spool_dir", {"on-disk spool of batches not yet acknowledged (default DATA_DIR/clickhouse-spool)",
                                [](AgentConfig& c, const std::string&, const std::string& v) {
                                  c.clickhouse.spool_dir = v;
                                }}},
      {"clickhouse.spool_max_size", {"the spool's size at most; beyond it the oldest unsent batches are dropped (default 1GiB)",
                                     [](AgentConfig& c, const std::string& k, const std::string& v) {
                                       c.clickhouse.spool_max_bytes = size_bytes(k, v);
                                       if (c.clickhouse.spool_max_bytes < (1u << 20))
                                         throw std::invalid_argument(k + ": at least 1MiB");
                                     }}},
      {"clickhouse.timeout", {"time one HTTP request to ClickHouse may take (default 10s)",
                              [](AgentConfig& c, const std::string& k, const std::string& v) {
                                c.clickhouse.timeout_s = static_cast<double>(duration_ns(k, v, 100'000'000)) * 1e-9;
                              }}},
  };
  return table;
}

// Leaves of a TOML table as dotted keys and text values (what set() takes).
void flatten(const toml::table& table, const std::string& prefix, std::map<std::string, std::string>& out,
             const std::string& path) {
  for (auto&& kv : table) {
    const std::string key = prefix + std::string(kv.first.str());
    const toml::node& node = kv.second;
    const auto line = kv.first.source().begin.line;
    if (const toml::table* sub = node.as_table()) {
      flatten(*sub, key + ".", out, path);
    } else if (const toml::array* arr = node.as_array()) {
      std::string joined;
      for (auto&& item : *arr) {
        auto s = item.value<std::string>();
        if (!s) throw std::invalid_argument(fmt::format("{}:{}: {}: a list of strings is expected", path, line, key));
        joined += (joined.empty() ? "" : ",") + *s;
      }
      out[key] = joined;
    } else if (auto s = node.value_exact<std::string>()) {
      out[key] = *s;
    } else if (auto b = node.value_exact<bool>()) {
      out[key] = *b ? "true" : "false";
    } else if (auto i = node.value_exact<int64_t>()) {
      out[key] = std::to_string(*i);
    } else if (auto d = node.value_exact<double>()) {
      out[key] = fmt::format("{}", *d);
    } else {
      throw std::invalid_argument(fmt::format("{}:{}: {}: unsupported value type", path, line, key));
    }
  }
}

}  // namespace

bool parse_size_bytes(const std::string& text, uint64_t& out) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  const std::string unit = text.substr(used);
  static const std::map<std::string, double> units = {
      {"", 1},         {"B", 1},          {"KB", 1e3},        {"MB", 1e6},         {"GB", 1e9},
      {"TB", 1e12},    {"KiB", 1024.0},   {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  auto it = units.find(unit);
  if (it == units.end() || !(v >= 0) || !std::isfinite(v)) return false;
  const double bytes = v * it->second;
  if (bytes > 9e18) return false;
  out = static_cast<uint64_t>(bytes);
  return true;
}

void AgentConfig::set(const std::string& key, const std::string& value) {
  auto it = specs().find(key);
  if (it == specs().end()) throw std::invalid_argument("unknown setting '" + key + "'");
  it->second.set(*this, key, value);
}

void AgentConfig::validate() const {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw std::invalid_argument("listen: '" + listen + "' is not HOST:PORT (e.g. 127.0.0.1:9477)");
  integer("listen", listen.substr(colon + 1), 0, 65535);
  if (segment_size_bytes > retention_size_bytes)
    throw std::invalid_argument("store.segment_size must not exceed store.retention_size");
}

uint64_t AgentConfig::min_free_floor(uint64_t fs_bytes) const {
  uint64_t floor = min_free_bytes ? min_free_bytes : UINT64_MAX;
  if (min_free_ratio > 0) floor = std::min(floor, static_cast<uint64_t>(min_free_ratio * static_cast<double>(fs_bytes)));
  return floor == UINT64_MAX ? 0 : floor;
}

const std::map<std::string, std::string>& agent_config_keys() {
  static const std::map<std::string, std::string> keys = [] {
    std::map<std::string, std::string> m;
    for (const auto& [k, spec] : specs()) m[k] = spec.help;
    return m;
  }();
  return keys;
}

AgentConfig load_agent_config(const std::string& path, const std::map<std::string, std::string>& overrides) {
  AgentConfig c;
  if (!path.empty()) {
    toml::table table;
    try {
      table = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      throw std::invalid_argument(fmt::format("{}:{}: {}", path, e.source().begin.line, e.description()));
    }
    std::map<std::string, std::string> values;
    flatten(table, "", values, path);
    for (const auto& [k, v] : values) {
      try {
        c.set(k, v);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(path + ": " + e.what());
      }
    }
  }
  for (const auto& [k, v] : overrides) c.set(k, v);
  c.validate();
  return c;
}

}  // namespace stackscope::agent
