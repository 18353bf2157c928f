#include "sample/procfs_parsers.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "model/text.h"

namespace stackscope::procfs {

namespace {
std::string at_line(size_t line, std::string_view what) { return "line " + std::to_string(line) + ": " + std::string(what); }
std::string bad_field(size_t line, std::string_view field, std::string_view tok) {
  std::string t(tok.substr(0, 32));
  return "line " + std::to_string(line) + ": field '" + std::string(field) + "' is not a number ('" + t + "')";
}
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Reads the numeric columns of one line into values[i], in the order of `fields`, setting bit i of `present`
// for each column read and reporting each one that is not a number; returns how many columns the line had.
template <size_t N, typename Mask>
size_t read_columns(Tokens& t, const std::array<std::string_view, N>& fields, std::array<uint64_t, N>& values,
                    Mask& present, size_t line, ParseReport& rep) {
  std::string_view tok;
  size_t i = 0;
  for (; i < N && t.next(tok); ++i) {
    if (auto v = parse_u64(tok)) {
      values[i] = *v;
      present |= static_cast<Mask>(Mask{1} << i);
      ++rep.values;
    } else {
      rep.fail(bad_field(line, fields[i], tok));
    }
  }
  return i;
}
}  // namespace

ParseReport parse_proc_stat(std::string_view text, ProcStat& out) {
  ParseReport rep;
  out.cpus.clear();
  out.ctxt = out.intr = out.processes = out.procs_running = out.procs_blocked = std::nullopt;
  LineReader lines(text);
  std::string_view line, tok;
  while (lines.next(line)) {
    Tokens t(line);
    if (!t.next(tok)) continue;
    if (starts_with(tok, "cpu")) {
      std::string_view suffix = tok.substr(3);
      if (!suffix.empty() && !parse_u64(suffix)) {
        rep.fail(at_line(lines.number(), "bad cpu label"));
        continue;
      }
      CpuTimesRow row;
      row.label = tok;
      read_columns(t, kCpuTimeFields, row.jiffies, row.present, lines.number(), rep);
      if (row.present == 0) {
        rep.fail(at_line(lines.number(), "cpu line without values"));
        continue;
      }
      out.cpus.push_back(row);
      continue;
    }
    std::optional<uint64_t>* target = nullptr;
    if (tok == "ctxt") target = &out.ctxt;
    else if (tok == "intr") target = &out.intr;  // first number is the total; per-IRQ counts come from /proc/interrupts
    else if (tok == "processes") target = &out.processes;
    else if (tok == "procs_running") target = &out.procs_running;
    else if (tok == "procs_blocked") target = &out.procs_blocked;
    if (!target) continue;
    std::string_view name = tok;
    if (t.next(tok) && (*target = parse_u64(tok))) ++rep.values;
    else rep.fail(bad_field(lines.number(), name, tok));
  }
  if (out.cpus.empty() && rep.error.empty()) rep.fail("no cpu lines");
  return rep;
}

ParseReport parse_loadavg(std::string_view text, LoadAvg& out) {
  ParseReport rep;
  out = LoadAvg{};
  Tokens t(text);
  std::string_view tok;
  std::optional<double>* loads[3] = {&out.load1, &out.load5, &out.load15};
  static constexpr std::string_view kNames[3] = {"load1", "load5", "load15"};
  for (int i = 0; i < 3; ++i) {
    if (!t.next(tok)) {
      rep.fail("missing field '" + std::string(kNames[i]) + "'");
      return rep;
    }
    auto v = parse_f64(tok);
    if (v && *v >= 0 && *v < 1e9) {  // a load of a billion runnable tasks is a corrupt file, not a load
      *loads[i] = v;
      ++rep.values;
    } else {
      rep.fail(bad_field(1, kNames[i], tok));
    }
  }
  if (!t.next(tok)) {
    rep.fail("missing field 'runnable/threads'");
    return rep;
  }
  size_t slash = tok.find('/');
  if (slash == std::string_view::npos) {
    rep.fail(bad_field(1, "runnable/threads", tok));
    return rep;
  }
  if ((out.runnable = parse_u64(tok.substr(0, slash)))) ++rep.values;
  else rep.fail(bad_field(1, "runnable", tok));
  if ((out.threads = parse_u64(tok.substr(slash + 1)))) ++rep.values;
  else rep.fail(bad_field(1, "threads", tok));
  return rep;
}

ParseReport parse_meminfo(std::string_view text, std::vector<KeyValue>& out) {
  ParseReport rep;
  out.clear();
  LineReader lines(text);
  std::string_view line, tok;
  while (lines.next(line)) {
    if (trim(line).empty()) continue;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      rep.fail(at_line(lines.number(), "no 'Key:'"));
      continue;
    }
    std::string_view key = line.substr(0, colon);
    Tokens t(line.substr(colon + 1));
    if (!t.next(tok)) {
      rep.fail(at_line(lines.number(), "no value for '" + std::string(key.substr(0, 32)) + "'"));
      continue;
    }
    auto v = parse_u64(tok);
    if (!v) {
      rep.fail(bad_field(lines.number(), key.substr(0, 32), tok));
      continue;
    }
    uint64_t value = *v;
    bool kb = false;
    if (t.next(tok)) {
      kb = true;
      if (tok != "kB") {
        rep.fail(at_line(lines.number(), "unknown unit '" + std::string(tok.substr(0, 16)) + "'"));
        continue;
      }
      if (value > UINT64_MAX / 1024) {
        rep.fail(at_line(lines.number(), "value overflows bytes"));
        continue;
      }
      value *= 1024;
    }
    out.push_back({key, value, kb});
    ++rep.values;
  }
  return rep;
}

ParseReport parse_flat_keyed(std::string_view text, std::vector<KeyValue>& out) {
  ParseReport rep;
  out.clear();
  LineReader lines(text);
  std::string_view line, key, tok;
  while (lines.next(line)) {
    Tokens t(line);
    if (!t.next(key)) continue;
    if (!t.next(tok)) {
      rep.fail(at_line(lines.number(), "no value for '" + std::string(key.substr(0, 32)) + "'"));
      continue;
    }
    auto v = parse_u64(tok);
    if (!v) {
      rep.fail(bad_field(lines.number(), key.substr(0, 32), tok));
      continue;
    }
    out.push_back({key, *v, false});
    ++rep.values;
  }
  return rep;
}

ParseReport parse_pressure(std::string_view text, std::vector<PressureLine>& out) {
  ParseReport rep;
  out.clear();
  LineReader lines(text);
  std::string_view line, tok;
  while (lines.next(line)) {
    Tokens t(line);
    if (!t.next(tok)) continue;
    if (tok != "some" && tok != "full") {
      rep.fail(at_line(lines.number(), "expected 'some' or 'full'"));
      continue;
    }
    PressureLine p;
    p.kind = tok;
    while (t.next(tok)) {
      size_t eq = tok.find('=');
      if (eq == std::string_view::npos) {
        rep.fail(at_line(lines.number(), "expected key=value"));
        continue;
      }
      std::string_view k = tok.substr(0, eq), v = tok.substr(eq + 1);
      std::optional<double>* avg = k == "avg10" ? &p.avg10 : k == "avg60" ? &p.avg60 : k == "avg300" ? &p.avg300 : nullptr;
      if (avg) {
        auto d = parse_f64(v);
        if (d && *d >= 0 && *d <= 100) {
          *avg = d;
          ++rep.values;
        } else {
          rep.fail(bad_field(lines.number(), k, v));
        }
      } else if (k == "total") {
        if ((p.total = parse_u64(v))) ++rep.values;
        else rep.fail(bad_field(lines.number(), k, v));
      }
    }
    out.push_back(p);
  }
  return rep;
}

ParseReport parse_net_dev(std::string_view text, std::vector<NetDevRow>& out) {
  ParseReport rep;
  out.clear();
  LineReader lines(text);
  std::string_view line;
  while (lines.next(line)) {
    size_t colon = line.find(':');
    // The two header lines have '|' and no "iface:" prefix.
    if (colon == std::string_view::npos) {
      if (!trim(line).empty() && line.find('|') == std::string_view::npos) rep.fail(at_line(lines.number(), "no 'iface:'"));
      continue;
    }
    NetDevRow row;
    row.iface = trim(line.substr(0, colon));
    if (row.iface.empty() || row.iface.find('|') != std::string_view::npos) {
      rep.fail(at_line(lines.number(), "bad interface name"));
      continue;
    }
    Tokens t(line.substr(colon + 1));
    const size_t columns = read_columns(t, kNetDevFields, row.values, row.present, lines.number(), rep);
    if (columns < kNetDevFields.size())
      rep.fail(at_line(lines.number(), "only " + std::to_string(columns) + " of 16 columns"));
    if (row.present) out.push_back(row);
  }
  return rep;
}

ParseReport parse_net_snmp(std::string_view text, std::vector<ProtoValue>& out) {
  ParseReport rep;
  out.clear();
  LineReader lines(text);
  std::string_view header, values;
  while (lines.next(header)) {
    if (trim(header).empty()) continue;
    size_t header_line = lines.number();
    if (!lines.next(values)) {
      rep.fail(at_line(header_line, "header without a value line"));
      break;
    }
    size_t c1 = header.find(':'), c2 = values.find(':');
    if (c1 == std::string_view::npos || c2 == std::string_view::npos || header.substr(0, c1) != values.substr(0, c2)) {
      rep.fail(at_line(header_line, "header and value lines do not pair"));
      continue;
    }
    std::string_view group = header.substr(0, c1);
    Tokens names(header.substr(c1 + 1)), vals(values.substr(c2 + 1));
    std::string_view name, v;
    bool more_names;
    while ((more_names = names.next(name)) && vals.next(v)) {
      if (auto x = parse_i64(v)) {
        out.push_back({group, name, *x});
        ++rep.values;
      } else {
        rep.fail(bad_field(lines.number(), name, v));
      }
    }
    if (more_names || vals.next(v)) rep.fail(at_line(lines.number(), "names and values differ in count"));
  }
  return rep;
}

ParseReport parse_diskstats(std::string_view text, std::vector<DiskRow>& out) {
  ParseReport rep;
  out.clear();
  LineReader lines(text);
  std::string_view line, tok;
  while (lines.next(line)) {
    Tokens t(line);
    if (!t.next(tok)) continue;
    DiskRow row;
    auto major = parse_u64(tok);
    std::string_view mtok;
    auto minor = t.next(mtok) ? parse_u64(mtok) : std::nullopt;
    if (!major || !minor || *major > UINT32_MAX || *minor > UINT32_MAX || !t.next(row.name)) {
      rep.fail(at_line(lines.number(), "expected 'major minor name'"));
      continue;
    }
    row.major = static_cast<uint32_t>(*major);
    row.minor = static_cast<uint32_t>(*minor);
    const size_t columns = read_columns(t, kDiskFields, row.values, row.present, lines.number(), rep);
    if (columns < 11) rep.fail(at_line(lines.number(), "only " + std::to_string(columns) + " columns (at least 11 expected)"));
    if (row.present) out.push_back(row);
  }
  return rep;
}

ParseReport parse_interrupts(std::string_view text, Interrupts& out) {
  ParseReport rep;
  out.cpus.clear();
  out.rows.clear();
  out.counts.clear();
  LineReader lines(text);
  std::string_view line, tok;
  if (!lines.next(line)) {
    rep.fail("empty");
    return rep;
  }
  Tokens header(line);
  while (header.next(tok)) {
    auto n = tok.substr(0, 3) == "CPU" ? parse_u64(tok.substr(3)) : std::nullopt;
    if (!n || *n >= 65536) {
      rep.fail(at_line(1, "header is not 'CPU0 CPU1 ...'"));
      return rep;
    }
    out.cpus.push_back(static_cast<int>(*n));
  }
  if (out.cpus.empty()) {
    rep.fail(at_line(1, "no CPU columns"));
    return rep;
  }
  while (lines.next(line)) {
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      if (!trim(line).empty()) rep.fail(at_line(lines.number(), "no 'LABEL:'"));
      continue;
    }
    IrqRow row;
    row.label = trim(line.substr(0, colon));
    if (row.label.empty() || row.label.find(' ') != std::string_view::npos) {
      rep.fail(at_line(lines.number(), "bad label"));
      continue;
    }
    row.first = out.counts.size();
    Tokens t(line.substr(colon + 1));
    bool bad = false;
    while (row.n < out.cpus.size()) {
      Tokens probe = t;
      if (!probe.next(tok)) break;
      auto v = parse_u64(tok);
      if (!v) {
        // A token that is not a count ends the counts; it must be the description, not a broken number.
        if (!tok.empty() && tok[0] >= '0' && tok[0] <= '9') bad = true;
        break;
      }
      t = probe;
      out.counts.push_back(*v);
      ++row.n;
    }
    if (bad || row.n == 0) {
      out.counts.resize(row.first);
      rep.fail(at_line(lines.number(), "counts of '" + std::string(row.label.substr(0, 16)) + "' unreadable"));
      continue;
    }
    row.description = t.rest();
    rep.values += row.n;
    out.rows.push_back(row);
  }
  return rep;
}

ParseReport parse_cgroup_io_stat(std::string_view text, std::vector<KeyValue>& out) {
  ParseReport rep;
  out.clear();
  LineReader lines(text);
  std::string_view line, tok;
  while (lines.next(line)) {
    Tokens t(line);
    if (!t.next(tok)) continue;
    if (tok.find(':') == std::string_view::npos) {
      rep.fail(at_line(lines.number(), "expected 'major:minor'"));
      continue;
    }
    while (t.next(tok)) {
      size_t eq = tok.find('=');
      auto v = eq == std::string_view::npos ? std::nullopt : parse_u64(tok.substr(eq + 1));
      if (!v) {
        rep.fail(at_line(lines.number(), "bad 'key=value' ('" + std::string(tok.substr(0, 32)) + "')"));
        continue;
      }
      std::string_view key = tok.substr(0, eq);
      auto it = std::find_if(out.begin(), out.end(), [&](const KeyValue& kv) { return kv.key == key; });
      if (it == out.end()) out.push_back({key, *v, false});
      else it->value += *v;
      ++rep.values;
    }
  }
  return rep;
}

ParseReport parse_perf_group_read(std::span<const uint8_t> data, PerfGroupRead& out) {
  ParseReport rep;
  out.values.clear();
  auto u64_at = [&](size_t i) {
    uint64_t v;
    std::memcpy(&v, data.data() + 8 * i, 8);
    return v;
  };
  if (data.size() < 24 || data.size() % 8 != 0) {
    rep.fail("perf read of " + std::to_string(data.size()) + " bytes (at least 24, a multiple of 8)");
    return rep;
  }
  uint64_t nr = u64_at(0);
  if (nr > 64 || data.size() != 8 * (3 + nr)) {
    rep.fail("perf read claims " + std::to_string(nr) + " counters in " + std::to_string(data.size()) + " bytes");
    return rep;
  }
  out.time_enabled = u64_at(1);
  out.time_running = u64_at(2);
  for (uint64_t i = 0; i < nr; ++i) out.values.push_back(u64_at(3 + i));
  rep.values = nr;
  return rep;
}

std::optional<std::string_view> find_cgroup2_mount(std::string_view mountinfo) {
  LineReader lines(mountinfo);
  std::string_view line, tok;
  while (lines.next(line)) {
    // "36 25 0:31 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw": field 5 is the mount point, the first
    // field after the lone "-" is the file system type.
    Tokens t(line);
    std::string_view mount_point;
    for (int i = 0; i < 5 && t.next(tok); ++i) mount_point = tok;
    while (t.next(tok) && tok != "-") {
    }
    if (t.next(tok) && tok == "cgroup2" && !mount_point.empty()) return mount_point;
  }
  return std::nullopt;
}

std::optional<int64_t> parse_sysfs_int(std::string_view text) { return parse_i64(trim(text)); }

ParseReport parse_pid_stat(std::string_view text, PidStat& out) {
  ParseReport rep;
  out = PidStat{};
  size_t open = text.find(" (");
  size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open + 2) {
    rep.fail("no '(name)' field");
    return rep;
  }
  auto pid = parse_u64(text.substr(0, open));
  if (!pid || *pid > UINT32_MAX) {
    rep.fail("pid is not a number");
    return rep;
  }
  out.pid = static_cast<uint32_t>(*pid);
  out.comm = text.substr(open + 2, close - open - 2);
  // Field numbers as in proc(5): 3 is the state, right after the name.
  Tokens tok(text.substr(close + 1));
  std::string_view t;
  int field = 2;
  bool have_start = false;
  while (tok.next(t)) {
    ++field;
    auto number = [&](uint64_t& v) {
      if (auto n = parse_u64(t)) {
        v = *n;
        ++rep.values;
        return true;
      }
      rep.fail("field " + std::to_string(field) + " is not a number");
      return false;
    };
    uint64_t ppid = 0;
    switch (field) {
      case 3: out.state = t.empty() ? '?' : t[0]; break;
      case 4:
        if (number(ppid)) out.ppid = static_cast<uint32_t>(ppid);
        break;
      case 14: number(out.utime); break;
      case 15: number(out.stime); break;
      case 20: number(out.num_threads); break;
      case 22: have_start = number(out.start_time); break;
      default: break;
    }
    if (field == 22) break;
  }
  if (!have_start && rep.ok()) rep.fail("only " + std::to_string(field) + " fields, starttime (22) missing");
  return rep;
}

std::optional<uint64_t> parse_schedstat_run_delay(std::string_view text) {
  Tokens tok(text);
  std::string_view t;
  if (!tok.next(t) || !parse_u64(t) || !tok.next(t)) return std::nullopt;
  return parse_u64(t);
}

std::optional<uint64_t> parse_schedstat_on_cpu(std::string_view text) {
  Tokens tok(text);
  std::string_view t;
  if (!tok.next(t)) return std::nullopt;
  return parse_u64(t);
}

std::string printable_comm(std::string_view comm) {
  std::string out = printable_text(comm, '?');
  if (out.empty()) out = "?";
  return out;
}

}  // namespace stackscope::procfs
