// The agent's endpoint and store under hostile or failing conditions: idle and slow HTTP clients, request bodies, a
// bearer token; retention among files the agent did not write; a full disk and the free-space floor; a reload to a
// busy port or an uncreatable data_dir; host counters across sampler restarts.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/agent_config.h"
#include "agent/agent_metrics.h"
#include "agent/http_endpoint.h"
#include "agent/segment_store.h"
#include "model/clock.h"
#include "store/recording_reader.h"
#include "test_util.h"

using namespace stackscope;
using namespace stackscope::agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A host counter exported from the node's samples is the source's total, also after the samplers restart (a
// reload makes a new exporter): not the total added once more each time.
TEST(AgentMetrics, HostCountersStayTheTrueTotalAcrossSamplerRestarts) {
  AgentMetrics m("node1", "0.1.0");
  struct Null final : TelemetrySink {
    SeriesId add_series(const SeriesInfo&) override { return ++n; }
    void append_event(Event&&) override {}
    void append_samples(std::span<const Sample>) override {}
    void add_drops(std::string_view, uint64_t) override {}
    void add_note(std::string_view, std::string_view) override {}
    SeriesId n = 0;
  };
  const auto info = series_info("gpu.energy", "gpu0", Subsystem::gpu, "joules", SeriesKind::counter,
                                SeriesCategory::dynamic, "nvml");
  const std::string series = "stackscope_gpu_energy_joules_total{gpu=\"gpu0\"} ";
  auto value = [&] {
    const std::string text = m.scrape();
    const auto at = text.find(series);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size()));
  };
  for (double total : {722.0, 725.0, 731.0}) {  // each a restart of the samplers, the source counting on
    Null null;
    auto exporter = m.host_exporter(null, 100);
    const SeriesId id = exporter->add_series(info);
    Sample s{id, 1, total};
    exporter->append_samples(std::span(&s, 1));
    EXPECT_DOUBLE_EQ(value(), total);
  }
}
