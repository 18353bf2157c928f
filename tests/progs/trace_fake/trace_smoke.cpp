// CLI-independent smoke tool for the uprobe tracer: attaches to a pid (or --all) for some seconds and prints
// what it saw, per event name, plus notes and drops.
//   trace_smoke LAYERS SECONDS (PID | all) [python-mode]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "model/sink.h"
#include "trace/uprobe_tracer.h"

using namespace stackscope;

namespace {
class SummarySink : public TelemetrySink {
 public:
  SeriesId add_series(const SeriesInfo&) override { return 0; }
  void append_event(Event&& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto& s = by_name_[std::string(layer_name(e.layer)) + " " + e.name];
    s.count++;
    s.total_ns += e.duration_ns;
    if (s.example.empty()) {
      for (auto& a : e.args) {
        s.example += " " + a.key + "=";
        if (auto* i = std::get_if<int64_t>(&a.value)) s.example += std::to_string(*i);
        else if (auto* d = std::get_if<double>(&a.value)) s.example += std::to_string(*d);
        else s.example += std::get<std::string>(a.value);
      }
    }
  }
  void append_samples(std::span<const Sample>) override {}
  void add_drops(std::string_view source, uint64_t n) override {
    std::printf("drops %.*s %llu\n", static_cast<int>(source.size()), source.data(), static_cast<unsigned long long>(n));
  }
  void add_note(std::string_view source, std::string_view text) override {
    std::printf("note %.*s: %.*s\n", static_cast<int>(source.size()), source.data(), static_cast<int>(text.size()),
                text.data());
  }
  void print() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, s] : by_name_)
      std::printf("%8llu  %10.1f us avg  %s |%s\n", static_cast<unsigned long long>(s.count),
                  s.count ? s.total_ns / 1e3 / s.count : 0.0, name.c_str(), s.example.c_str());
  }

 private:
  struct Stat {
    uint64_t count = 0;
    int64_t total_ns = 0;
    std::string example;
  };
  std::mutex mu_;
  std::map<std::string, Stat> by_name_;
};
}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s LAYERS SECONDS (PID|all) [auto|usdt|capi]\n", argv[0]);
    return 2;
  }
  trace::TracerOptions topts;
  topts.verbose = std::getenv("STACKSCOPE_BPF_VERBOSE") != nullptr;
  if (argc > 4) topts.python_mode = argv[4];
  trace::UprobeTracer tracer(parse_layer_list(argv[1]), topts);
  CollectorOptions copts;
  std::string target = argv[3];
  if (target == "all") copts.all_processes = true;
  else copts.pids.push_back(static_cast<uint32_t>(std::atoi(target.c_str())));
  SummarySink sink;
  auto st = tracer.start(sink, copts);
  std::printf("start: %s (%s)\n", st.running ? "running" : "not running", st.message.c_str());
  if (!st.running) return 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(std::atof(argv[2]) * 1000)));
  auto stats = tracer.stats();
  tracer.stop();
  std::printf("links %zu events %llu lost %llu nested %llu unmatched %llu\n", stats.links,
              static_cast<unsigned long long>(stats.events), static_cast<unsigned long long>(stats.lost),
              static_cast<unsigned long long>(stats.nested), static_cast<unsigned long long>(stats.unmatched));
  sink.print();
  return 0;
}
