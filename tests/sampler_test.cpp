// The host telemetry sampler: every parser on this machine's live files, on captured fixtures and on broken
// copies; the sampler end to end into an in-memory sink; the family list.
#include <gtest/gtest.h>

#include <cctype>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <chrono>
#include <set>
#include <thread>

#include "memory_sink.h"
#include "sample/procfs_parsers.h"
#include "sample/procfs_sampler.h"
#include "test_util.h"

using namespace stackscope;
using namespace stackscope::procfs;
using stackscope::testing::MemorySink;

namespace {

std::string fixture(const std::string& name) {
  return read_file(std::string(STACKSCOPE_SOURCE_DIR) + "/tests/data/procfs/" + name);
}
std::string live(const std::string& path) {
  auto s = read_small_file(path, 16u << 20);
  return s ? *s : std::string();
}

// A parser under test, flattened: text in, report and every value out.
struct ParserCase {
  std::string name;
  std::string fixture;    // file under tests/data/procfs
  std::string live_path;  // the same file on this machine
  std::function<ParseReport(std::string_view, std::vector<double>&)> run;
};

std::vector<ParserCase> parser_cases() {
  std::vector<ParserCase> c;
  c.push_back({"stat", "stat", "/proc/stat", [](std::string_view t, std::vector<double>& v) {
                 ProcStat s;
                 auto r = parse_proc_stat(t, s);
                 for (auto& row : s.cpus)
                   for (size_t i = 0; i < 8; ++i)
                     if (row.present & (1u << i)) v.push_back(static_cast<double>(row.jiffies[i]));
                 for (auto* o : {&s.ctxt, &s.intr, &s.processes, &s.procs_running, &s.procs_blocked})
                   if (*o) v.push_back(static_cast<double>(**o));
                 return r;
               }});
  c.push_back({"loadavg", "loadavg", "/proc/loadavg", [](std::string_view t, std::vector<double>& v) {
                 LoadAvg la;
                 auto r = parse_loadavg(t, la);
                 for (auto* o : {&la.load1, &la.load5, &la.load15})
                   if (*o) v.push_back(**o);
                 for (auto* o : {&la.runnable, &la.threads})
                   if (*o) v.push_back(static_cast<double>(**o));
                 return r;
               }});
  auto keyed = [](auto parser) {
    return [parser](std::string_view t, std::vector<double>& v) {
      std::vector<KeyValue> kv;
      auto r = parser(t, kv);
      for (auto& e : kv) v.push_back(static_cast<double>(e.value));
      return r;
    };
  };
  c.push_back({"meminfo", "meminfo", "/proc/meminfo", keyed(parse_meminfo)});
  c.push_back({"vmstat", "vmstat", "/proc/vmstat", keyed(parse_flat_keyed)});
  c.push_back({"cgroup cpu.stat", "cgroup_cpu.stat", "", keyed(parse_flat_keyed)});
  c.push_back({"cgroup memory.stat", "cgroup_memory.stat", "", keyed(parse_flat_keyed)});
  c.push_back({"cgroup io.stat", "cgroup_io.stat", "", keyed(parse_cgroup_io_stat)});
  for (std::string res : {"cpu", "memory", "io"})
    c.push_back({"pressure/" + res, "pressure_" + res, "/proc/pressure/" + res,
                 [](std::string_view t, std::vector<double>& v) {
                   std::vector<PressureLine> p;
                   auto r = parse_pressure(t, p);
                   for (auto& l : p) {
                     for (auto* o : {&l.avg10, &l.avg60, &l.avg300})
                       if (*o) v.push_back(**o);
                     if (l.total) v.push_back(static_cast<double>(*l.total));
                   }
                   return r;
                 }});
  c.push_back({"net/dev", "net_dev", "/proc/net/dev", [](std::string_view t, std::vector<double>& v) {
                 std::vector<NetDevRow> rows;
                 auto r = parse_net_dev(t, rows);
                 for (auto& row : rows)
                   for (size_t i = 0; i < 16; ++i)
                     if (row.present & (1u << i)) v.push_back(static_cast<double>(row.values[i]));
                 return r;
               }});
  auto snmp = [](std::string_view t, std::vector<double>& v) {
    std::vector<ProtoValue> pv;
    auto r = parse_net_snmp(t, pv);
    for (auto& e : pv) v.push_back(static_cast<double>(e.value));
    return r;
  };
  c.push_back({"net/snmp", "net_snmp", "/proc/net/snmp", snmp});
  c.push_back({"net/netstat", "net_netstat", "/proc/net/netstat", snmp});
  c.push_back({"diskstats", "diskstats", "/proc/diskstats", [](std::string_view t, std::vector<double>& v) {
                 std::vector<DiskRow> rows;
                 auto r = parse_diskstats(t, rows);
                 for (auto& row : rows)
                   for (size_t i = 0; i < 17; ++i)
                     if (row.present & (1u << i)) v.push_back(static_cast<double>(row.values[i]));
                 return r;
               }});
  auto irq = [](std::string_view t, std::vector<double>& v) {
    Interrupts it;
    auto r = parse_interrupts(t, it);
    for (auto x : it.counts) v.push_back(static_cast<double>(x));
    return r;
  };
  c.push_back({"interrupts", "interrupts", "/proc/interrupts", irq});
  c.push_back({"softirqs", "softirqs", "/proc/softirqs", irq});
  return c;
}

}  // namespace

// ---------------------------------------------------------------- parsers on real files

TEST(SamplerParsers, FixturesParseCleanly) {
  for (auto& pc : parser_cases()) {
    std::string text = fixture(pc.fixture);
    ASSERT_FALSE(text.empty()) << pc.fixture;
    std::vector<double> v;
    ParseReport r = pc.run(text, v);
    EXPECT_TRUE(r.ok()) << pc.name << ": " << r.error;
    EXPECT_EQ(r.skipped, 0u) << pc.name;
    EXPECT_GT(v.size(), 0u) << pc.name;
    EXPECT_GE(r.values, v.size()) << pc.name;  // io.stat sums fields over devices
    for (double x : v) EXPECT_TRUE(std::isfinite(x) && x >= -1) << pc.name;  // Tcp MaxConn is -1
  }
}

TEST(SamplerParsers, LiveFilesParseCleanly) {
  for (auto& pc : parser_cases()) {
    if (pc.live_path.empty()) continue;
    std::string text = live(pc.live_path);
    if (text.empty() && !std::filesystem::exists(pc.live_path)) continue;  // e.g. no PSI on this kernel
    std::vector<double> v;
    ParseReport r = pc.run(text, v);
    EXPECT_TRUE(r.ok()) << pc.live_path << ": " << r.error;
    EXPECT_GT(v.size(), 0u) << pc.live_path;
  }
}

TEST(SamplerParsers, ProcStatFixtureValues) {
  ProcStat s;
  std::string text = fixture("stat");  // parsed views point into it
  ASSERT_TRUE(parse_proc_stat(text, s).ok());
  // The capture: "cpu  13120 0 4064 450057 551 0 111 12 0 0", then cpu0 and cpu1.
  ASSERT_EQ(s.cpus.size(), 3u);
  EXPECT_EQ(s.cpus[0].label, "cpu");
  EXPECT_EQ(s.cpus[2].label, "cpu1");
  EXPECT_EQ(s.cpus[0].jiffies[0], 13120u);
  EXPECT_EQ(s.cpus[0].jiffies[3], 450057u);
  EXPECT_EQ(s.cpus[0].present, 0xff);
  // Per-core columns add up to the total (within the jiffy the kernel's two reads may differ by).
  for (size_t i = 0; i < 8; ++i)
    EXPECT_NEAR(static_cast<double>(s.cpus[1].jiffies[i] + s.cpus[2].jiffies[i]),
                static_cast<double>(s.cpus[0].jiffies[i]), 2.0)
        << kCpuTimeFields[i];
  EXPECT_EQ(*s.ctxt, 619158u);
  EXPECT_EQ(*s.procs_running, 3u);
}

TEST(SamplerParsers, FixtureValuesOfOtherFiles) {
  // Parsed views point into the text: keep every text alive while its values are used.
  std::string meminfo = fixture("meminfo"), snmp = fixture("net_snmp"), netstat = fixture("net_netstat"),
              netdev = fixture("net_dev"), diskstats = fixture("diskstats"), interrupts = fixture("interrupts"),
              psi = fixture("pressure_cpu"), io = fixture("cgroup_io.stat"), mountinfo = fixture("mountinfo");
  std::vector<KeyValue> kv;
  ASSERT_TRUE(parse_meminfo(meminfo, kv).ok());
  auto mem = [&](std::string_view k) {
    for (auto& e : kv)
      if (e.key == k) return std::optional(e);
    return std::optional<KeyValue>();
  };
  ASSERT_TRUE(mem("MemTotal") && mem("MemAvailable"));
  EXPECT_TRUE(mem("MemTotal")->scaled_kb);
  EXPECT_EQ(mem("MemTotal")->value % 1024, 0u);
  EXPECT_LT(mem("MemAvailable")->value, mem("MemTotal")->value);
  ASSERT_TRUE(mem("HugePages_Total"));
  EXPECT_FALSE(mem("HugePages_Total")->scaled_kb);  // a count, not kB

  std::vector<ProtoValue> pv;
  ASSERT_TRUE(parse_net_snmp(snmp, pv).ok());
  auto proto = [&](std::string_view g, std::string_view n) {
    for (auto& e : pv)
      if (e.group == g && e.name == n) return std::optional(e.value);
    return std::optional<int64_t>();
  };
  EXPECT_EQ(proto("Tcp", "MaxConn"), -1);
  EXPECT_EQ(proto("Tcp", "InSegs"), 2327);
  EXPECT_EQ(proto("Udp", "InDatagrams"), 26);
  ASSERT_TRUE(parse_net_snmp(netstat, pv).ok());
  EXPECT_EQ(proto("IpExt", "InOctets"), 109887512);
  EXPECT_TRUE(proto("TcpExt", "ListenOverflows").has_value());

  std::vector<NetDevRow> dev;
  ASSERT_TRUE(parse_net_dev(netdev, dev).ok());
  ASSERT_EQ(dev.size(), 4u);
  EXPECT_EQ(dev[3].iface, "eth0");
  EXPECT_EQ(dev[3].values[0], 109917021u);
  EXPECT_EQ(dev[3].values[8], 95710u);

  std::vector<DiskRow> disks;
  ASSERT_TRUE(parse_diskstats(diskstats, disks).ok());
  auto vda = std::find_if(disks.begin(), disks.end(), [](auto& d) { return d.name == "vda"; });
  ASSERT_NE(vda, disks.end());
  EXPECT_EQ(vda->major, 254u);
  EXPECT_EQ(vda->values[2], 3380778u);  // sectors read
  EXPECT_EQ(vda->present, (1u << 17) - 1);

  Interrupts irq;
  ASSERT_TRUE(parse_interrupts(interrupts, irq).ok());
  EXPECT_EQ(irq.cpus, (std::vector<int>{0, 1}));
  auto row = [&](std::string_view label) {
    for (auto& r : irq.rows)
      if (r.label == label) return std::optional(r);
    return std::optional<IrqRow>();
  };
  ASSERT_TRUE(row("36") && row("LOC") && row("ERR"));
  EXPECT_EQ(irq.counts[row("36")->first + 1], 97072u);
  EXPECT_EQ(row("36")->description, "PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0");
  EXPECT_EQ(row("ERR")->n, 1u);
  EXPECT_EQ(row("LOC")->description, "Local timer interrupts");

  std::vector<PressureLine> p;
  ASSERT_TRUE(parse_pressure(psi, p).ok());
  ASSERT_EQ(p.size(), 2u);
  EXPECT_DOUBLE_EQ(*p[0].avg10, 39.97);
  EXPECT_EQ(*p[0].total, 28253829u);

  ASSERT_TRUE(parse_cgroup_io_stat(io, kv).ok());
  EXPECT_EQ(mem("rbytes")->value, 1048576u + 512u);  // summed over both devices
  EXPECT_EQ(mem("wios")->value, 3u);

  auto mount = find_cgroup2_mount(mountinfo);
  ASSERT_TRUE(mount);
  EXPECT_EQ(*mount, "/sys/fs/cgroup/unified");
}

// ---------------------------------------------------------------- parsers on broken input

TEST(SamplerParsers, MalformedInputNeverCrashesNorInventsValues) {
  std::mt19937 rng(42);
  for (auto& pc : parser_cases()) {
    std::string good = fixture(pc.fixture);
    std::vector<double> good_values;
    pc.run(good, good_values);
    std::multiset<double> known(good_values.begin(), good_values.end());

    // Empty and whitespace-only input.
    for (std::string_view text : {std::string_view(""), std::string_view("\n\n  \n")}) {
      std::vector<double> v;
      pc.run(text, v);
      EXPECT_TRUE(v.empty()) << pc.name;
    }
    // Truncated anywhere: every value comes from a whole line of the original, except possibly the last
    // line's number that the cut shortened, which is a prefix of an original number.
    size_t step = std::max<size_t>(1, good.size() / 300);
    for (size_t cut = 0; cut < good.size(); cut += step) {
      std::vector<double> v;
      pc.run(std::string_view(good).substr(0, cut), v);
      EXPECT_LE(v.size(), good_values.size() + 1) << pc.name << " cut at " << cut;
      for (double x : v) EXPECT_TRUE(std::isfinite(x)) << pc.name;
    }
    // Random garbage bytes sprinkled over a copy.
    for (int round = 0; round < 50; ++round) {
      std::string bad = good;
      for (int k = 0; k < 8 && !bad.empty(); ++k) bad[rng() % bad.size()] = static_cast<char>(rng() % 256);
      std::vector<double> v;
      pc.run(bad, v);
      for (double x : v) EXPECT_TRUE(std::isfinite(x)) << pc.name;
    }
    // Pure garbage.
    std::string noise(2000, '\0');
    for (char& ch : noise) ch = static_cast<char>(rng() % 256);
    std::vector<double> nv;
    pc.run(noise, nv);
    for (double x : nv) EXPECT_TRUE(std::isfinite(x)) << pc.name;
  }
}

TEST(SamplerParsers, HugeNumbersAreSkippedWithAnError) {
  const std::string huge = "123456789012345678901234567890";  // beyond 2^64
  for (auto& pc : parser_cases()) {
    std::string good = fixture(pc.fixture);
    // Replace the first run of digits that follows a blank (a value, not a label such as "cpu0").
    size_t pos = 0;
    for (;;) {
      pos = good.find_first_of("0123456789", pos);
      ASSERT_NE(pos, std::string::npos) << pc.name;
      bool after_blank = pos > 0 && (good[pos - 1] == ' ' || good[pos - 1] == '=' || good[pos - 1] == '\t');
      size_t run_end = good.find_first_not_of("0123456789", pos);
      bool is_label = run_end != std::string::npos && good[run_end] == ':';  // " 24:" in /proc/interrupts
      if (after_blank && !is_label && pos + 1 < good.size()) break;
      pos = good.find_first_not_of("0123456789", pos);
    }
    size_t end = good.find_first_not_of("0123456789.", pos);
    std::string bad = good.substr(0, pos) + huge + good.substr(end);
    std::vector<double> v;
    ParseReport r = pc.run(bad, v);
    EXPECT_FALSE(r.ok()) << pc.name << " accepted " << huge;
    for (double x : v) EXPECT_LT(x, 1.2e20) << pc.name;  // UINT64_MAX is 1.8e19
  }
}

TEST(SamplerParsers, BrokenFieldsAreNamed) {
  ProcStat s;
  auto r = parse_proc_stat("cpu  10 x 30 40\ncpu0 1 2\nctxt many\n", s);
  ASSERT_EQ(s.cpus.size(), 2u);
  EXPECT_EQ(s.cpus[0].present, 0b1101);  // nice unreadable, the rest of the short line read
  EXPECT_EQ(s.cpus[0].jiffies[2], 30u);
  EXPECT_EQ(s.cpus[1].present, 0b11);  // missing columns are absent, not zero
  EXPECT_FALSE(s.ctxt);
  EXPECT_NE(r.error.find("nice"), std::string::npos) << r.error;
  EXPECT_EQ(r.skipped, 2u);

  std::vector<KeyValue> kv;
  r = parse_meminfo("MemTotal: 100 kB\nMemFree: -5 kB\nBogus\nCached: 7 MB\nHuge: 99999999999999999 kB\n", kv);
  ASSERT_EQ(kv.size(), 1u);
  EXPECT_EQ(kv[0].value, 102400u);
  EXPECT_EQ(r.skipped, 4u);
  EXPECT_NE(r.error.find("MemFree"), std::string::npos) << r.error;

  LoadAvg la;
  r = parse_loadavg("0.5 nan 1.0 3/100 5", la);
  EXPECT_TRUE(la.load1 && !la.load5 && la.load15 && la.threads);
  EXPECT_NE(r.error.find("load5"), std::string::npos);

  std::vector<PressureLine> p;
  r = parse_pressure("some avg10=250.0 total=5\nbogus avg10=1\n", p);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_FALSE(p[0].avg10);  // a percentage over 100 is not believed
  EXPECT_EQ(*p[0].total, 5u);
  EXPECT_EQ(r.skipped, 2u);

  std::vector<ProtoValue> pv;
  r = parse_net_snmp("Tcp: A B C\nTcp: 1 2\nUdp: X\n", pv);
  EXPECT_EQ(pv.size(), 2u);
  EXPECT_FALSE(r.ok());

  Interrupts irq;
  r = parse_interrupts("  CPU0 CPU1\n 1: 5 6 IO-APIC x\n 2: 5 7z IO-APIC y\nLOC: 1 2 Local\n", irq);
  ASSERT_EQ(irq.rows.size(), 2u);  // the row with a broken count is dropped whole
  EXPECT_EQ(irq.counts, (std::vector<uint64_t>{5, 6, 1, 2}));
  EXPECT_FALSE(r.ok());
  r = parse_interrupts("garbage header\n 1: 5 6\n", irq);
  EXPECT_TRUE(irq.rows.empty());
  EXPECT_FALSE(r.ok());

  std::vector<DiskRow> disks;
  r = parse_diskstats("8 0 sda 1 2 3\n", disks);
  ASSERT_EQ(disks.size(), 1u);
  EXPECT_EQ(disks[0].present, 0b111u);
  EXPECT_FALSE(r.ok());

  PerfGroupRead pr;
  std::vector<uint8_t> raw(8 * 5, 0);
  raw[0] = 2;   // nr
  raw[8] = 10;  // enabled
  raw[16] = 5;  // running
  raw[24] = 7;
  raw[32] = 9;
  EXPECT_TRUE(parse_perf_group_read(raw, pr).ok());
  EXPECT_EQ(pr.values, (std::vector<uint64_t>{7, 9}));
  raw[0] = 3;  // claims more counters than bytes
  EXPECT_FALSE(parse_perf_group_read(raw, pr).ok());
  EXPECT_TRUE(pr.values.empty());
  EXPECT_FALSE(parse_perf_group_read(std::span<const uint8_t>(raw.data(), 13), pr).ok());

  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_FALSE(parse_cpu_list("3-1"));
  EXPECT_FALSE(parse_cpu_list("0-99999999"));
  EXPECT_FALSE(parse_sysfs_int("12 34"));
  EXPECT_EQ(parse_sysfs_int("45000\n"), 45000);
}

TEST(SamplerParsers, ProcFileRereadsLargeAndChangingFiles) {
  TempDir dir;
  std::string big(100'000, 'x');
  write_file(dir.file("big"), big);
  ProcFile f;
  ASSERT_TRUE(f.open(dir.file("big")));
  auto t = f.read();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->size(), big.size());
  write_file(dir.file("big"), "short");  // same inode, truncated: the next read sees the new text
  t = f.read();
  ASSERT_TRUE(t);
  EXPECT_EQ(*t, "short");
  auto capped = f.read(3);
  ASSERT_TRUE(capped);
  EXPECT_LE(capped->size(), 4096u);  // the cap bounds growth; the buffer already had a page
  write_file(dir.file("big"), big);
  ProcFile one;
  ASSERT_TRUE(one.open(dir.file("big"), /*one_record=*/true));
  for (int i = 0; i < 2; ++i) {
    t = one.read();
    ASSERT_TRUE(t);
    EXPECT_EQ(t->size(), big.size());
  }
  ProcFile missing;
  EXPECT_FALSE(missing.open(dir.file("nope")));
  EXPECT_NE(missing.error().find("nope"), std::string::npos);
  EXPECT_FALSE(missing.read());
}

// ---------------------------------------------------------------- the sampler

namespace {
// A /proc copy made of the fixtures, and an empty /sys: every sample is deterministic.
void make_fixture_tree(const TempDir& dir) {
  std::filesystem::create_directories(dir.file("proc/net"));
  std::filesystem::create_directories(dir.file("proc/pressure"));
  std::filesystem::create_directories(dir.file("sys"));
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"stat", "stat"}, {"loadavg", "loadavg"}, {"meminfo", "meminfo"}, {"vmstat", "vmstat"},
           {"net_dev", "net/dev"}, {"net_snmp", "net/snmp"}, {"net_netstat", "net/netstat"},
           {"diskstats", "diskstats"}, {"interrupts", "interrupts"}, {"softirqs", "softirqs"},
           {"pressure_cpu", "pressure/cpu"}, {"pressure_memory", "pressure/memory"}, {"pressure_io", "pressure/io"}})
    write_file(dir.file("proc/" + to), fixture(from));
}
// How many times a family was read: the distinct timestamps of its series (those named `prefix`...).
size_t reads_of(const MemorySink& sink, const std::string& prefix) {
  std::set<int64_t> ticks;
  for (const SeriesInfo& s : sink.series())
    if (s.name.rfind(prefix, 0) == 0)
      for (const Sample& x : sink.samples_of(s.id)) ticks.insert(x.t_ns);
  return ticks.size();
}
}  // namespace

TEST(ProcfsSampler, FixtureTreeGivesNamedSeriesInBaseUnits) {
  TempDir dir;
  make_fixture_tree(dir);
  ProcfsSamplerOptions opt;
  opt.proc_root = dir.file("proc");
  opt.sys_root = dir.file("sys");
  opt.families = parse_procfs_family_list("stat,loadavg,meminfo,vmstat,pressure,netdev,netproto,diskstats,"
                                          "interrupts,softirqs");
  ProcfsSampler sampler(opt);
  MemorySink sink;
  CollectorStatus st = sampler.open(sink, "testhost");
  ASSERT_TRUE(st.running) << st.message;
  EXPECT_EQ(st.message, "");
  sampler.tick();
  sampler.tick();
  EXPECT_EQ(sink.batches(), 2u);

  const SeriesInfo* user = sink.find("cpu.time.user", "cpu1");
  ASSERT_TRUE(user);
  EXPECT_EQ(user->unit, "jiffies");
  EXPECT_EQ(user->kind, SeriesKind::counter);
  EXPECT_EQ(user->host, "testhost");
  EXPECT_EQ(user->source, "procfs");
  ASSERT_TRUE(sink.find("cpu.time.idle", ""));
  EXPECT_EQ(sink.samples_of(sink.find("cpu.time.idle", "")->id)[0].value, 450057);

  const SeriesInfo* total = sink.find("mem.MemTotal");
  ASSERT_TRUE(total);
  EXPECT_EQ(total->unit, "bytes");
  EXPECT_EQ(total->category, SeriesCategory::static_value);
  const SeriesInfo* rx = sink.find("net.rx.bytes", "eth0");
  ASSERT_TRUE(rx);
  EXPECT_EQ(sink.samples_of(rx->id)[0].value, 109917021);
  EXPECT_EQ(sink.find("net.rx.drop", "eth0")->category, SeriesCategory::event_counter);
  ASSERT_TRUE(sink.find("net.Tcp.RetransSegs"));
  EXPECT_EQ(sink.find("net.Tcp.RetransSegs")->category, SeriesCategory::event_counter);
  EXPECT_FALSE(sink.find("net.MPTcpExt.MPCapableSYNRX"));  // outside the curated subset
  const SeriesInfo* rd = sink.find("disk.read_bytes", "vda");
  ASSERT_TRUE(rd);
  EXPECT_EQ(sink.samples_of(rd->id)[0].value, 3380778.0 * 512);
  EXPECT_FALSE(sink.find("disk.reads", "loop0"));  // virtual disks left out
  const SeriesInfo* irq = sink.find("irq.36.virtio1-req.0", "cpu1");
  ASSERT_TRUE(irq);
  EXPECT_FALSE(sink.find("irq.36.virtio1-req.0", "cpu0"));  // zero on cpu0: no series
  ASSERT_TRUE(sink.find("softirq.NET_RX", "cpu0"));
  EXPECT_EQ(sink.find("softirq.NET_RX", "cpu0")->subsystem, Subsystem::network);
  const SeriesInfo* psi = sink.find("pressure.cpu.some.avg10");
  ASSERT_TRUE(psi);
  EXPECT_DOUBLE_EQ(sink.samples_of(psi->id)[0].value, 0.3997);
  ASSERT_TRUE(sink.find("vm.pgmajfault"));
  EXPECT_EQ(sink.find("vm.nr_dirty")->unit, "bytes");

  // Every series on both ticks, except the event-counter families read every 250 ms (netproto: net.<Proto>.*,
  // interrupts: irq.*), which the default 100 ms interval reads on the first tick of each 250 ms only.
  size_t n = sink.series().size();
  for (auto& s : sink.series()) {
    const bool every_250ms = s.name.rfind("irq.", 0) == 0 ||
                             (s.name.rfind("net.", 0) == 0 && s.name.size() > 4 && std::isupper(static_cast<unsigned char>(s.name[4])));
    EXPECT_EQ(sink.samples_of(s.id).size(), every_250ms ? 1u : 2u) << s.key();
  }
  std::set<std::string> keys;
  for (auto& s : sink.series()) keys.insert(s.key());
  EXPECT_EQ(keys.size(), n);
  EXPECT_TRUE(sink.notes().empty());
}

TEST(ProcfsSampler, BrokenFileIsReportedOnceAndTheRestGoesOn) {
  TempDir dir;
  make_fixture_tree(dir);
  write_file(dir.file("proc/meminfo"), "MemTotal: 100 kB\nMemFree: lots kB\n");
  ProcfsSamplerOptions opt;
  opt.proc_root = dir.file("proc");
  opt.sys_root = dir.file("sys");
  opt.families = {"stat", "meminfo"};
  ProcfsSampler sampler(opt);
  MemorySink sink;
  ASSERT_TRUE(sampler.open(sink, "h").running);
  for (int i = 0; i < 5; ++i) sampler.tick();
  auto notes = sink.notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].source, "procfs.meminfo");
  EXPECT_NE(notes[0].text.find("MemFree"), std::string::npos) << notes[0].text;
  ASSERT_TRUE(sink.find("mem.MemTotal"));
  EXPECT_EQ(sink.samples_of(sink.find("mem.MemTotal")->id).size(), 5u);
  EXPECT_FALSE(sink.find("mem.MemFree"));
  EXPECT_TRUE(sink.find("cpu.time.user"));
}

TEST(ProcfsSampler, MissingSourcesAreUnavailableNotFatal) {
  TempDir dir;
  ProcfsSamplerOptions opt;
  opt.proc_root = dir.file("proc");  // empty tree
  opt.sys_root = dir.file("sys");
  opt.families = {"stat", "meminfo"};
  ProcfsSampler sampler(opt);
  MemorySink sink;
  CollectorStatus st = sampler.open(sink, "h");
  EXPECT_FALSE(st.running);
  EXPECT_NE(st.message.find("stat"), std::string::npos);
  EXPECT_EQ(sink.notes().size(), 2u);
}

// The agent's idle node: while live_idle is true the costlier families (idle_families, softirqs here) are read every
// idle_period_ms, the others every tick; from the first tick after it turns false every family at its usual period.
TEST(ProcfsSampler, AnIdleNodeReadsItsCostlierFamiliesLessOften) {
  TempDir dir;
  make_fixture_tree(dir);
  ProcfsSamplerOptions opt;
  opt.proc_root = dir.file("proc");
  opt.sys_root = dir.file("sys");
  opt.families = {"stat", "softirqs"};
  auto idle = std::make_shared<std::atomic<bool>>(true);
  opt.live_idle = idle;
  opt.idle_period_ms = 1000;  // ticks of 100 ms (tick()'s period): every 10th
  ProcfsSampler sampler(opt);
  MemorySink sink;
  ASSERT_TRUE(sampler.open(sink, "h").running);
  // Samples by family: the stat family's cpu.time.* and the softirqs family's softirq.* series.
  auto reads = [&](const std::string& prefix) { return reads_of(sink, prefix); };
  for (int i = 0; i < 20; ++i) sampler.tick();
  EXPECT_EQ(reads("cpu.time."), 20u) << "stat every tick";
  EXPECT_EQ(reads("softirq."), 2u) << "softirqs every 10th tick while idle";
  idle->store(false);  // a job is traced
  for (int i = 0; i < 5; ++i) sampler.tick();
  EXPECT_EQ(reads("softirq."), 7u) << "every tick from the first with a job";
  idle->store(true);
  for (int i = 0; i < 10; ++i) sampler.tick();
  EXPECT_EQ(reads("softirq."), 8u) << "idle again: one read in 10 ticks";
  EXPECT_EQ(reads("cpu.time."), 35u);
  sampler.stop();
  const auto notes = sink.notes();
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](auto& n) {
    return n.text.find("while the node is idle (no job traced): softirqs at most every 1000 ms") != std::string::npos;
  }));
  // The agent's node sampler says what each family cost, and how often it was read.
  auto cost = std::find_if(notes.begin(), notes.end(), [](auto& n) { return n.text.find("host families") == 0; });
  ASSERT_NE(cost, notes.end());
  EXPECT_NE(cost->text.find("over 35 ticks of 100 ms, 30 of them idle"), std::string::npos) << cost->text;
  EXPECT_NE(cost->text.find(" (35), softirqs "), std::string::npos) << cost->text;
  EXPECT_NE(cost->text.find(" (8)"), std::string::npos) << cost->text;
}

// The agent's node sampler shared with a traced job follows the fastest consumer's period (live_interval_ms): at
// 1000 ms every family each tick, at 100 ms the 250 ms family (interrupts) every 2nd tick (stride 250/100) and stat
// every tick; from the first tick at a new period every family is read.
TEST(ProcfsSampler, ALiveIntervalSetsTheFamiliesStrides) {
  TempDir dir;
  make_fixture_tree(dir);
  ProcfsSamplerOptions opt;
  opt.proc_root = dir.file("proc");
  opt.sys_root = dir.file("sys");
  opt.families = {"stat", "interrupts"};
  auto live = std::make_shared<std::atomic<int>>(1000);
  opt.live_interval_ms = live;
  opt.live_idle = std::make_shared<std::atomic<bool>>(false);  // a job is traced: no idle schedule
  ProcfsSampler sampler(opt);
  MemorySink sink;
  ASSERT_TRUE(sampler.open(sink, "h").running);
  auto reads = [&](const std::string& prefix) { return reads_of(sink, prefix); };
  auto tick = [&] {
    sampler.tick();
    std::this_thread::sleep_for(std::chrono::microseconds(50));  // distinct timestamps
  };
  for (int i = 0; i < 3; ++i) tick();
  EXPECT_EQ(reads("cpu.time."), 3u);
  EXPECT_EQ(reads("irq."), 3u) << "every tick at 1000 ms";
  tick();  // 4 reads of each: the 4th of interrupts at tick 3, 1000 ms since its last
  live->store(100);  // a job came
  for (int i = 0; i < 6; ++i) tick();
  EXPECT_EQ(reads("cpu.time."), 10u);
  EXPECT_EQ(reads("irq."), 7u) << "at 100 ms: the first tick, then every 2nd";
  live->store(1000);  // the job went
  for (int i = 0; i < 2; ++i) tick();
  EXPECT_EQ(reads("irq."), 9u) << "every tick again";
  sampler.stop();
  // The node's cost note (live_idle set) gives the range of periods it ticked at.
  const auto notes = sink.notes();
  auto cost = std::find_if(notes.begin(), notes.end(), [](auto& n) { return n.text.find("host families") == 0; });
  ASSERT_NE(cost, notes.end());
  EXPECT_NE(cost->text.find("over 12 ticks of 100-1000 ms, 0 of them idle"), std::string::npos) << cost->text;
}

TEST(ProcfsSampler, FamilyListParsingAndListing) {
  EXPECT_EQ(parse_procfs_family_list("stat, meminfo,stat"), (std::vector<std::string>{"stat", "meminfo"}));
  EXPECT_GE(parse_procfs_family_list("all").size(), 17u);
  try {
    parse_procfs_family_list("stat,bogus");
    FAIL() << "accepted an unknown family";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bogus"), std::string::npos);
  }
  auto fams = list_procfs_families();
  std::map<std::string, ProcfsFamilyInfo> by_name;
  for (auto& f : fams) by_name[f.name] = f;
  for (std::string name : {"stat", "meminfo", "vmstat", "netdev", "diskstats", "interrupts", "softirqs"}) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_TRUE(by_name[name].available) << name << ": " << by_name[name].reason;
    EXPECT_FALSE(by_name[name].description.empty());
  }
  for (auto& f : fams)
    if (!f.available) {
      EXPECT_FALSE(f.reason.empty()) << f.name;
    }
  ASSERT_TRUE(by_name.count("perf_hw"));
  ASSERT_TRUE(by_name.count("perf_sw"));
}

// ~1 s at 10 ms on this machine's real files, every family on.
TEST(ProcfsSampler, LiveRunAt10msIntoMemorySink) {
  auto fams = list_procfs_families();
  bool pmu = std::any_of(fams.begin(), fams.end(), [](auto& f) { return f.name == "perf_hw" && f.available; });
  ProcfsSampler sampler{ProcfsSamplerOptions{}};
  MemorySink sink;
  CollectorOptions co;
  co.interval_ms = 10;
  co.host = "live";
  CollectorStatus st = sampler.start(sink, co);
  ASSERT_TRUE(st.running) << st.message;
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  sampler.stop();
  sampler.stop();  // idempotent
  ProcfsSamplerStats stats = sampler.stats();

  // About 100 ticks; a loaded 2-core CI machine may skip some, never burst.
  EXPECT_GE(stats.ticks, 50u);
  EXPECT_LE(stats.ticks, 102u);
  EXPECT_EQ(sink.batches(), stats.ticks);
  EXPECT_EQ(stats.samples, sink.samples().size());
  EXPECT_EQ(stats.series, sink.series().size());
  EXPECT_GT(stats.series, 100u);

  std::map<SeriesId, std::vector<Sample>> by_series;
  for (const Sample& s : sink.samples()) by_series[s.series].push_back(s);
  for (const SeriesInfo& info : sink.series()) {
    auto& list = by_series[info.id];
    if (info.kind == SeriesKind::static_value) continue;
    // Series present from the first tick have one sample per tick; lazily declared ones (an IRQ that first
    // fired mid-run) fewer.
    EXPECT_LE(list.size(), stats.ticks) << info.key();
    for (size_t i = 1; i < list.size(); ++i) {
      ASSERT_GT(list[i].t_ns, list[i - 1].t_ns) << info.key();
      if (info.kind == SeriesKind::counter) {
        ASSERT_GE(list[i].value, list[i - 1].value) << info.key();
      }
    }
    for (const Sample& s : list) ASSERT_TRUE(std::isfinite(s.value)) << info.key();
  }
  const SeriesInfo* user = sink.find("cpu.time.user", "");
  ASSERT_TRUE(user);
  EXPECT_EQ(by_series[user->id].size(), stats.ticks);
  ASSERT_TRUE(sink.find("sampler.cpu_time"));
  ASSERT_TRUE(sink.find("perf.context_switches", "cpu0")) << "software perf events work on this machine";

  auto notes = sink.notes();
  size_t pmu_notes = std::count_if(notes.begin(), notes.end(), [](auto& n) { return n.source == "procfs.perf_hw"; });
  if (pmu) {
    EXPECT_EQ(pmu_notes, 0u);
    EXPECT_TRUE(sink.find("perf.cycles"));
  } else {
    // This VM: no PMU. Said exactly once, clearly, in the recording and in the status.
    EXPECT_EQ(pmu_notes, 1u);
    auto it = std::find_if(notes.begin(), notes.end(), [](auto& n) { return n.source == "procfs.perf_hw"; });
    EXPECT_NE(it->text.find("no hardware PMU"), std::string::npos) << it->text;
    EXPECT_NE(st.message.find("perf_hw: no hardware PMU"), std::string::npos) << st.message;
    EXPECT_FALSE(sink.find("perf.cycles"));
  }
  // Each note is said once: no family repeats itself tick after tick.
  std::set<std::pair<std::string, std::string>> distinct;
  for (auto& n : notes) distinct.insert({n.source, n.text});
  EXPECT_EQ(distinct.size(), notes.size());
}

TEST(ProcfsSampler, CgroupLeafWithProcessesIsSampled) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root to create a cgroup");
  auto mi = read_small_file("/proc/self/mountinfo");
  auto mount = mi ? find_cgroup2_mount(*mi) : std::nullopt;
  STACKSCOPE_REQUIRE(mount, "no cgroup v2 mount");
  std::string root(*mount);
  std::string name = "stackscope-sampler-test-" + std::to_string(::getpid());
  std::string dir = root + "/" + name;
  STACKSCOPE_REQUIRE(::mkdir(dir.c_str(), 0755) == 0, "cannot create " << dir);
  pid_t child = ::fork();
  if (child == 0) {
    for (;;) ::pause();
  }
  write_file(dir + "/cgroup.procs", std::to_string(child));
  ProcfsSamplerOptions opt;
  opt.families = {"cgroup"};
  ProcfsSampler sampler(opt);
  MemorySink sink;
  CollectorStatus st = sampler.open(sink, "h");
  sampler.tick();
  sampler.tick();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::rmdir(dir.c_str());
  ASSERT_TRUE(st.running) << st.message;
  const SeriesInfo* usage = sink.find("cgroup.cpu.usage", name);
  ASSERT_TRUE(usage) << "no series for cgroup " << name;
  EXPECT_EQ(usage->unit, "microseconds");
  EXPECT_EQ(usage->source, "cgroup");
  EXPECT_EQ(sink.samples_of(usage->id).size(), 2u);
}

TEST(ProcfsSampler, CgroupCapIsHonoured) {
  TempDir dir;
  // A fake cgroup tree: three leaves with processes, one without, one inner node.
  for (std::string g : {"a", "b", "c", "empty", "inner/x"}) {
    std::filesystem::create_directories(dir.file("cg/" + g));
    bool populated = g != "empty";
    write_file(dir.file("cg/" + g + "/cgroup.events"), std::string("populated ") + (populated ? "1" : "0") + "\nfrozen 0\n");
    write_file(dir.file("cg/" + g + "/cpu.stat"), fixture("cgroup_cpu.stat"));
    write_file(dir.file("cg/" + g + "/memory.stat"), fixture("cgroup_memory.stat"));
    write_file(dir.file("cg/" + g + "/io.stat"), fixture("cgroup_io.stat"));
    write_file(dir.file("cg/" + g + "/memory.current"), "123456\n");
  }
  write_file(dir.file("cg/inner/cgroup.events"), "populated 1\n");
  ProcfsSamplerOptions opt;
  opt.families = {"cgroup"};
  opt.cgroup_root = dir.file("cg");
  opt.max_cgroups = 3;
  ProcfsSampler sampler(opt);
  MemorySink sink;
  ASSERT_TRUE(sampler.open(sink, "h").running);
  sampler.tick();
  std::set<std::string> groups;
  for (auto& s : sink.series()) groups.insert(s.device);
  EXPECT_EQ(groups.size(), 3u);
  EXPECT_FALSE(groups.count("empty"));
  EXPECT_FALSE(groups.count("inner"));  // not a leaf
  auto notes = sink.notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].text.find("max_cgroups=3"), std::string::npos);
  const SeriesInfo* cur = nullptr;
  for (auto& s : sink.series())
    if (s.name == "cgroup.memory.current") cur = &s;
  ASSERT_TRUE(cur);
  EXPECT_EQ(sink.samples_of(cur->id)[0].value, 123456);
  ASSERT_TRUE(sink.find("cgroup.io.read_bytes"));
  EXPECT_EQ(sink.samples_of(sink.find("cgroup.io.read_bytes")->id)[0].value, 1048576 + 512);
  EXPECT_TRUE(sink.find("cgroup.memory.file_dirty"));
  EXPECT_FALSE(sink.find("cgroup.memory.kernel_stack"));  // outside the subset
}
