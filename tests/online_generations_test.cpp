// OnlineGenerations: the windows the online incident engine (`record --detect`, the agent) evaluates per pass stay
// bounded whatever the job's age, and an incident is still found, as early, as when every window so far is
// evaluated. Work is counted in windows evaluated per pass, never timed.
#include <gtest/gtest.h>

#include <deque>
#include <memory>

#include "analyze/incidents/incident_engine.h"
#include "analyze/incidents/incident_input_builder.h"
#include "analyze/incidents/online_generations.h"

using namespace stackscope;
using namespace stackscope::analyze;
using namespace stackscope::analyze::incidents;

namespace {

constexpr int64_t kSec = 1'000'000'000;

TEST(OnlineGenerations, WindowsEvaluatedPerPassDoNotGrowWithTheJobsAge) {
  for (size_t span : {1u, 7u, 300u, 1800u}) {
    OnlineGenerations plan(span);
    plan.started();
    size_t most = 0, least_late = SIZE_MAX;
    for (size_t complete = 1; complete <= 20'000; ++complete) {  // one pass per window: 5.5 h of job
      const size_t n = plan.evaluated_windows(complete);
      most = std::max(most, n);
      if (complete >= 2 * span) least_late = std::min(least_late, n);
      EXPECT_LE(plan.evaluated_first(), complete);
      while (plan.start_due(complete)) {
        // Started span / 2 windows before its first one, so it sees all of its events.
        EXPECT_GE(plan.next_first(), complete + span / 2) << span;
        plan.started();
      }
      while (plan.drop_due(complete)) plan.dropped();
      EXPECT_LE(plan.firsts().size(), 3u);
    }
    EXPECT_EQ(most, 2 * span) << span;       // at most two spans, at 20,000 windows as at 2 x span
    EXPECT_GE(least_late, span) << span;     // and never less than one span of history once that old
  }
}

// A torch job: 10 outermost operators a second, 3 a second in windows [slow_from, slow_from + 15).
void feed_window(IncidentInputBuilder& b, size_t w, size_t slow_from) {
  const int ops = (w >= slow_from && w < slow_from + 15) ? 3 : 10;
  for (int k = 0; k < ops; ++k) {
    CallRecord c;
    c.layer = Layer::torch;
    c.pid = c.tid = 7;
    c.start_ns = static_cast<int64_t>(w) * kSec + k * (kSec / ops);
    c.duration_ns = 20'000'000;
    c.name = k % 2 ? "aten::mm" : "aten::relu";
    b.add(c);
  }
}

struct Found {
  size_t detected_at = SIZE_MAX;  // complete windows at the pass that first reported an incident
  int64_t start_ns = 0;
  size_t max_evaluated = 0;
};

// The engine's loop of online/online_detector.cpp over a job of `windows` windows, one pass per window from `from` on.
Found run_online(size_t span, size_t windows, size_t slow_from, size_t from) {
  OnlineGenerations plan(span);
  struct Gen {
    size_t first;
    std::unique_ptr<IncidentInputBuilder> b;
  };
  std::deque<Gen> gens;
  auto start = [&](size_t complete) {
    while (plan.start_due(complete)) {
      const size_t first = plan.next_first();
      gens.push_back({first, std::make_unique<IncidentInputBuilder>(
                                 WindowGrid{static_cast<int64_t>(first) * kSec, kSec, plan.grid_windows()},
                                 std::set<uint32_t>{7})});
      plan.started();
    }
  };
  start(0);
  Found f;
  for (size_t w = 0; w < windows; ++w) {
    for (auto& g : gens) feed_window(*g.b, w, slow_from);
    const size_t complete = w + 1;
    if (complete >= from && f.detected_at == SIZE_MAX) {
      const size_t n = plan.evaluated_windows(complete);
      IncidentOptions io;
      io.episodes.open_end = true;
      io.episodes.max_edge_fraction = 1.0;
      if (gens.front().first > 0) io.episodes.max_edge_windows = 0;
      const IncidentReport rep = find_incidents(gens.front().b->snapshot(n), io);
      f.max_evaluated = std::max(f.max_evaluated, n);
      if (!rep.incidents.empty()) {
        f.detected_at = complete;
        f.start_ns = rep.incidents.front().start_ns;
      }
    }
    start(complete);
    while (plan.drop_due(complete)) {
      gens.pop_front();
      plan.dropped();
    }
  }
  return f;
}

}  // namespace

TEST(OnlineGenerations, AnIncidentLateInTheJobIsFoundAsWhenEveryWindowIsEvaluated) {
  constexpr size_t kSlowFrom = 610, kWindows = 630;
  // Bounded: 150-window spans, every pass of the job (630 windows: three generations have come and gone).
  const Found bounded = run_online(150, kWindows, kSlowFrom, 8);
  // Unbounded (the engine before: one generation over the whole job), passes from just before the slowdown.
  const Found whole = run_online(3600, kWindows, kSlowFrom, kSlowFrom - 5);
  ASSERT_NE(whole.detected_at, SIZE_MAX);
  ASSERT_NE(bounded.detected_at, SIZE_MAX);  // no false incident before: detected only at the slowdown
  EXPECT_EQ(bounded.detected_at, whole.detected_at);
  EXPECT_EQ(bounded.start_ns, whole.start_ns);
  EXPECT_EQ(bounded.start_ns, static_cast<int64_t>(kSlowFrom) * kSec);
  EXPECT_LE(bounded.detected_at, kSlowFrom + 5);  // within 5 s of onset
  EXPECT_LE(bounded.max_evaluated, 300u);
  EXPECT_GE(whole.max_evaluated, kSlowFrom);
}
