// What the cost budget's duty cycle costs the traced job, toggles included: a subject's own throughput
// bare, with the family's probes always attached (no budget), and under the budget at several periods (the same
// watched share, so the hits it prices are the same and only the number of attach/detach toggles differs).
//   sudo build/bench/toggle_cost [--layers cuda|torch] [--seconds S] [--rounds R] [--periods MS,...] [--budget PCT]
//        [--hit-cost NS] [--torch-ops PATTERN] -- SUBJECT ARGS...
// The subject prints "ready", waits for a line on stdin, works for a while and prints "done COUNT ..." (the fake
// app's `steps SECONDS N`, fake_ops' `hot SECONDS US`, bench/overhead/tiny_ops_steps.py). Runs are interleaved
// (every configuration once per round, the order flipped every round), fresh processes each.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "../tests/subject_process.h"
#include "model/sink.h"
#include "trace/uprobe_tracer.h"

using namespace stackscope;

namespace {

class NoteSink final : public TelemetrySink {
 public:
  SeriesId add_series(const SeriesInfo&) override { return ++series_; }
  void append_event(Event&&) override {}
  void append_samples(std::span<const Sample>) override {}
  void add_drops(std::string_view, uint64_t) override {}
  void add_note(std::string_view, std::string_view text) override {
    std::lock_guard<std::mutex> lock(mu_);
    notes += std::string(text) + "\n";
  }
  std::string notes;

 private:
  std::mutex mu_;
  SeriesId series_ = 0;
};

struct Config {
  std::string name;
  bool traced = false;
  double budget_pct = 0;
  int period_ms = 1000;
  int max_period_ms = 1000;  // = period_ms: a fixed period; longer: the default's adaptive one
};

struct Run {
  double rate = 0;  // subject's COUNT per second
  double watched = 1, attach_ms = 0, detach_ms = 0, hit_cost_ns = 0, period_ms = 0, cpu_us = 0;
  uint64_t windows = 0, hits = 0, gated = 0;
};

Run run_once(const Config& c, const std::vector<std::string>& subject, Layer layer, double seconds, double hit_cost,
             const std::vector<std::string>& torch_ops) {
  Run r;
  Subject app(subject);
  if (app.expect("ready", std::chrono::seconds(60)).empty()) throw std::runtime_error("subject did not start");
  std::unique_ptr<trace::UprobeTracer> tracer;
  NoteSink sink;
  if (c.traced) {
    trace::TracerOptions topts;
    topts.budget_pct = c.budget_pct;
    topts.budget_period_ms = c.period_ms;
    topts.budget_max_period_ms = c.max_period_ms;
    topts.hit_cost_ns = hit_cost;
    tracer = std::make_unique<trace::UprobeTracer>(std::vector<Layer>{layer}, topts);
    CollectorOptions opts;
    opts.pids = {static_cast<uint32_t>(app.pid())};
    opts.torch_ops = torch_ops;
    auto st = tracer->start(sink, opts);
    if (!st.running) throw std::runtime_error("tracer: " + st.message);
    if (!tracer->wait_until_attached(app.pid(), layer, std::chrono::seconds(60)))
      throw std::runtime_error("probes not attached:\n" + sink.notes);
  }
  const auto t0 = std::chrono::steady_clock::now();
  app.send("go");
  const std::string done = app.expect("done", std::chrono::seconds(static_cast<int>(seconds * 4 + 60)));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rusage usage{};
  app.wait(&usage);
  if (done.size() < 6) throw std::runtime_error("subject gave no count");
  const double count = std::stod(done.substr(5));
  r.rate = count / std::min(wall, seconds);
  // CPU time per unit, user + system (the probes' traps are the subject's system time): steadier than the rate on
  // a loaded machine, where the subject also waits for a core.
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  r.cpu_us = count > 0 ? 1e6 * (secs(usage.ru_utime) + secs(usage.ru_stime)) / count : 0;
  if (tracer) {
    tracer->stop();
    auto s = tracer->stats();
    r.hits = s.hits;
    r.gated = s.gated;
    r.hit_cost_ns = tracer->hit_cost_ns();
    std::smatch m;
    static const std::regex note("probes watched ([0-9.]+)% of the recording since they were first attached \\(([0-9]+) "
                                 "window\\(s\\).*attach ([0-9.]+) ms, detach ([0-9.]+) ms per window; last period "
                                 "([0-9]+) ms");
    if (std::regex_search(sink.notes, m, note)) {
      r.watched = std::stod(m[1]) / 100;
      r.windows = std::stoull(m[2]);
      r.attach_ms = std::stod(m[3]);
      r.detach_ms = std::stod(m[4]);
      r.period_ms = std::stod(m[5]);
    }
    tracer->release();
  }
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Throughput of a traced subject bare, always attached, and duty-cycled at several budget periods"};
  std::string layer_name = "cuda";
  double seconds = 10, budget = 1, hit_cost = 0;
  int rounds = 3;
  std::vector<int> periods{1000, 5000, 10000};
  std::vector<std::string> torch_ops{"op*"}, subject;
  bool no_attached = false;
  app.add_option("--layers", layer_name, "cuda or torch")->check(CLI::IsMember({"cuda", "torch"}));
  app.add_option("--seconds", seconds, "How long the subject works (for the rates; it is told in its own args)");
  app.add_option("--rounds", rounds);
  app.add_option("--periods", periods, "Budget periods in ms")->delimiter(',');
  app.add_option("--budget", budget, "Budget in % of the job's CPU");
  app.add_option("--hit-cost", hit_cost, "Price of a probe hit in ns (0: measured at start)");
  app.add_option("--torch-ops", torch_ops)->delimiter(',');
  app.add_flag("--no-attached", no_attached, "Skip the always-attached configuration");
  app.add_option("subject", subject, "-- SUBJECT ARGS")->required();
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "toggle_cost: needs root (uprobes)\n");
    return 1;
  }
  const Layer layer = layer_name == "torch" ? Layer::torch : Layer::cuda;
  std::vector<Config> configs{{"bare", false, 0, 0, 0}};
  if (!no_attached) configs.push_back({"attached (no budget)", true, 0, 1000, 1000});
  for (int p : periods) configs.push_back({fmt::format("budget {}% / {} ms", budget, p), true, budget, p, p});
  const trace::TracerOptions defaults;
  configs.push_back({fmt::format("budget {}%, default period", budget), true, budget, defaults.budget_period_ms,
                     defaults.budget_max_period_ms});
  std::map<std::string, std::vector<Run>> runs;
  try {
    for (int round = 0; round < rounds; ++round) {
      std::vector<Config> order = configs;
      if (round % 2) std::reverse(order.begin(), order.end());
      for (auto& c : order) {
        Run r = run_once(c, subject, layer, seconds, hit_cost, torch_ops);
        std::fprintf(stderr, "round %d %-28s %10.1f /s %9.2f us CPU/unit  watched %.2f%%  windows %lu  period %.0f ms"
                     "  attach %.1f ms detach %.1f ms  hits %lu gated %lu\n", round + 1, c.name.c_str(), r.rate,
                     r.cpu_us, 100 * r.watched,
                     static_cast<unsigned long>(r.windows), r.period_ms, r.attach_ms, r.detach_ms,
                     static_cast<unsigned long>(r.hits), static_cast<unsigned long>(r.gated));
        runs[c.name].push_back(r);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "toggle_cost: %s\n", e.what());
    return 1;
  }
  auto med = [&](const std::string& name, auto field) {
    std::vector<double> v;
    for (auto& r : runs[name]) v.push_back(static_cast<double>(field(r)));
    return median(v);
  };
  const double bare = med("bare", [](const Run& r) { return r.rate; });
  const double bare_cpu = med("bare", [](const Run& r) { return r.cpu_us; });
  std::printf("| configuration | median rate /s | vs bare (wall per unit) | CPU us per unit | vs bare (CPU) | watched "
              "| windows | last period ms | attach ms | detach ms | hits | hits while capture off |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (auto& c : configs) {
    const double rate = med(c.name, [](const Run& r) { return r.rate; });
    const double cpu = med(c.name, [](const Run& r) { return r.cpu_us; });
    std::printf("| %s | %.1f | %s | %.2f | %s | %.2f%% | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f |\n", c.name.c_str(),
                rate, c.traced ? fmt::format("{:+.1f} %", 100 * (bare / rate - 1)).c_str() : "", cpu,
                c.traced ? fmt::format("{:+.1f} %", 100 * (cpu / bare_cpu - 1)).c_str() : "",
                100 * med(c.name, [](const Run& r) { return r.watched; }),
                med(c.name, [](const Run& r) { return r.windows; }),
                med(c.name, [](const Run& r) { return r.period_ms; }),
                med(c.name, [](const Run& r) { return r.attach_ms; }),
                med(c.name, [](const Run& r) { return r.detach_ms; }),
                med(c.name, [](const Run& r) { return r.hits; }), med(c.name, [](const Run& r) { return r.gated; }));
  }
  return 0;
}
