// Scale of the table-building stage of `analyze`: a synthetic one-hour recording of a busy GPU job (about 60 M
// events, store/synthetic_recording.h) read into every layer's window feature tables at 1 s windows
// (store/recording_window_tables.h). Peak RSS comes from /usr/bin/time -v (and VmHWM, printed at the end).
//   analyze_scale generate OUT.sdb [--seconds 3600] [--seed 1]
//   analyze_scale tables REC.sdb [--window 1] [--csv-dir DIR]   one streaming pass, every layer's table
//   analyze_scale phases REC.sdb                               where the time goes, pass by pass
// bench/analyze_scale.sh runs the whole comparison and prints the figures of docs/benchmarks/analyze-scale.md.
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "store/recording_reader.h"
#include "store/recording_window_tables.h"
#include "store/synthetic_recording.h"

using namespace stackscope;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of the whole process (every thread), user + system: on a shared, loaded VM the fairer figure.
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// "W s wall, C s CPU" since (t0, c0), and resets both.
std::string lap(std::chrono::steady_clock::time_point& t0, double& c0) {
  const std::string s = fmt::format("{:.2f} s wall, {:.2f} s CPU", seconds_since(t0), cpu_seconds() - c0);
  t0 = std::chrono::steady_clock::now();
  c0 = cpu_seconds();
  return s;
}

std::string status_field(const char* key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return line.substr(std::strlen(key));
  return "?";
}

const char* option(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 3; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

int generate(const std::string& path, int argc, char** argv) {
  SyntheticGpuJobOptions o;
  o.seconds = std::stod(option(argc, argv, "--seconds", "3600"));
  o.seed = std::stoull(option(argc, argv, "--seed", "1"));
  const auto t0 = std::chrono::steady_clock::now();
  const auto s = write_synthetic_gpu_job(path, o);
  fmt::print("generated {}: {:.0f} s of job, {} events, {} samples, {} series in {:.1f} s\n", path, o.seconds,
             s.events, s.samples, s.series, seconds_since(t0));
  return 0;
}

int tables(const std::string& path, int argc, char** argv) {
  WindowTablesOptions o;
  o.window_s = std::stod(option(argc, argv, "--window", "1"));
  const std::string csv_dir = option(argc, argv, "--csv-dir", "");
  const auto t0 = std::chrono::steady_clock::now();
  const RecordingReader r(path);
  const RecordingWindowTables t = read_window_tables(r, o);
  const double elapsed = seconds_since(t0);
  uint64_t events = 0;
  for (auto& [layer, n] : t.events) events += n;
  fmt::print("{}: {} windows of {} s; {} events, {} samples read in {:.2f} s ({:.2f} M events/s)\n", path,
             t.grid.count, o.window_s, events, t.samples, elapsed, static_cast<double>(events) / elapsed * 1e-6);
  for (auto& [layer, table] : t.tables) {
    fmt::print("  {:7} {:5} columns ({} subjects)\n", layer, table.columns.size(), table.subjects.size());
    if (csv_dir.empty()) continue;
    std::ofstream out(csv_dir + "/" + layer + ".csv");
    out << "t0_ns,t1_ns";
    for (auto& c : table.columns) out << ',' << c;
    out << '\n';
    for (size_t w = 0; w < t.grid.count; ++w) {
      out << t.grid.start(w) << ',' << t.grid.end(w);
      for (Eigen::Index c = 0; c < table.values.cols(); ++c)
        out << fmt::format(",{}", table.values(static_cast<Eigen::Index>(w), c));
      out << '\n';
    }
  }
  fmt::print("peak RSS (VmHWM):{}\n", status_field("VmHWM:"));
  return 0;
}

int phases(const std::string& path) {
  const RecordingReader r(path);
  auto t0 = std::chrono::steady_clock::now();
  double c0 = cpu_seconds();
  uint64_t n = 0, args = 0;
  r.for_each_event_ref({}, [&](const codec::EventRef& e) {
    ++n;
    args += e.args.size();
  });
  fmt::print("read + decompress + decode every event block as stored (EventRef): {} ({} events, {} args)\n",
             lap(t0, c0), n, args);
  n = 0;
  r.for_each_event({}, [&](const Event& e) { n += e.args.size() > 0; });
  fmt::print("same, each event built as an Event (strings copied): {}\n", lap(t0, c0));
  uint64_t samples = 0;
  r.for_each_sample_run([&](const SeriesInfo&, std::span<const int64_t> t, std::span<const double>) { samples += t.size(); });
  fmt::print("read + decode every sample block: {} ({} samples)\n", lap(t0, c0), samples);
  for (Layer l : {Layer::cuda, Layer::torch, Layer::python, Layer::nccl}) {
    WindowTablesOptions o;
    o.layers = {l};
    const auto t = read_window_tables(r, o);
    fmt::print("{} table alone (its own pass, decoding on a second thread): {}\n", layer_name(l), lap(t0, c0));
  }
  WindowTablesOptions o;
  o.layers = {Layer::nvml, Layer::host};
  const auto t = read_window_tables(r, o);
  fmt::print("nvml + host tables (one sample pass): {}\n", lap(t0, c0));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: analyze_scale generate OUT.sdb [--seconds S] [--seed N]\n"
                 "       analyze_scale tables REC.sdb [--window S] [--csv-dir DIR]\n"
                 "       analyze_scale phases REC.sdb\n");
    return 2;
  }
  try {
    const std::string mode = argv[1], path = argv[2];
    if (mode == "generate") return generate(path, argc, argv);
    if (mode == "tables") return tables(path, argc, argv);
    if (mode == "phases") return phases(path);
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "analyze_scale: error: %s\n", e.what());
    return 1;
  }
}
