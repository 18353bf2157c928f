// Stage 3 (KAIR §III-B, backward blame attribution) over the step's dependency DAG: program order within a
// worker, and collective/point-to-point edges between the participants of one communication instance.
//  - an operation with an abnormal (long) duration is the culprit: a compute operator, or, for a
//    communication whose participants all arrived on time, the communication link itself;
//  - a communication that is long because a participant arrived late hands the blame to that participant;
//  - an operation that started late with a normal duration passes the blame to its predecessor if that one
//    ended late; if the predecessor ended on time, the dependency edge between them is the culprit.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <set>
#include <unordered_map>

#include "analyze/stragglers/straggler.h"

namespace stackscope::analyze {

std::string_view cause_kind_name(CauseKind k) {
  switch (k) {
    case CauseKind::compute_operator: return "compute-operator";
    case CauseKind::communication_link: return "communication-link";
    case CauseKind::dependency_edge: return "dependency-edge";
  }
  return "?";
}

namespace {

struct Culprit {
  CauseKind kind;
  int worker;
  int64_t pred;  // edge: the predecessor op (-1: start of the timeline)
  uint32_t op;
  double excess;
  double z;
};

// The op that must finish before `i` can start, in program order: among the few ops before it, the one that
// ended last without ending after `i` started (another stream's overlapping op is not a predecessor).
int64_t predecessor(const std::vector<TimelineOp>& ops, uint32_t i) {
  int64_t best = -1;
  int64_t best_end = INT64_MIN;
  for (int64_t j = static_cast<int64_t>(i) - 1; j >= 0 && j >= static_cast<int64_t>(i) - 16; --j) {
    const int64_t end = ops[j].end_ns();
    if (end <= ops[i].start_ns + 1000 && end > best_end) {
      best = j;
      best_end = end;
    }
  }
  return best >= 0 ? best : static_cast<int64_t>(i) - 1;
}

}  // namespace

std::vector<RootCause> stage3_blame(const TimelineSet& set, const std::vector<int64_t>& /*offsets*/,
                                    const Stage2Result& stage2, const Stage3Options& options) {
  const double t = options.threshold;
  // Participants of each communication instance.
  std::unordered_map<uint64_t, std::vector<std::pair<int, uint32_t>>> instances;
  for (size_t w = 0; w < set.workers.size(); ++w) {
    const auto& ops = set.workers[w].ops;
    for (uint32_t i = 0; i < ops.size(); ++i)
      if ((ops[i].kind == OpKind::collective || ops[i].kind == OpKind::p2p) && ops[i].collective_seq >= 0)
        instances[(static_cast<uint64_t>(ops[i].comm) << 40) ^ static_cast<uint64_t>(ops[i].collective_seq)]
            .emplace_back(static_cast<int>(w), i);
  }
  auto stats = [&](int w, uint32_t i) -> const OpStats& { return stage2.stats[w][i]; };

  // Once an operation is known to be late, its lateness is followed in nanoseconds: a predecessor (or a
  // participant) explains it when it accounts for at least half of the delay.
  enum class Mode { entry, ended_late, started_late };
  auto walk = [&](int w, uint32_t i) -> std::optional<Culprit> {
    Mode mode = Mode::entry;
    for (int guard = 0; guard < 100000; ++guard) {
      const auto& ops = set.workers[w].ops;
      const TimelineOp& op = ops[i];
      const OpStats& st = stats(w, i);
      switch (mode) {
        case Mode::entry:
          if (!st.peers) return std::nullopt;
          if (is_communication(op.kind) && st.z_end > t && st.z_start <= t) {
            mode = Mode::ended_late;
          } else if (!is_communication(op.kind) && st.z_duration > t) {
            return Culprit{CauseKind::compute_operator, w, -1, i, double(op.duration_ns) - st.expected_duration,
                           st.z_duration};
          } else if (st.z_start > t) {
            mode = Mode::started_late;
          } else {
            return std::nullopt;  // flagged for being early or short: nobody waited for it
          }
          continue;
        case Mode::ended_late: {
          if (st.start_delay >= 0.5 * st.end_delay) {
            mode = Mode::started_late;
            continue;
          }
          if (!is_communication(op.kind))
            return Culprit{CauseKind::compute_operator, w, -1, i, double(op.duration_ns) - st.expected_duration,
                           std::max(st.z_duration, st.z_end)};
          if (op.kind != OpKind::sync) {
            auto it = instances.find((static_cast<uint64_t>(op.comm) << 40) ^ static_cast<uint64_t>(op.collective_seq));
            // A peer of this worker in the same instance that ended on time shows that the instance as a
            // whole was not late: then this worker's own link is. Otherwise a participant that arrived late
            // by a comparable amount is where the delay came from.
            bool peer_on_time = false;
            std::pair<int, uint32_t> latest{-1, 0};
            double latest_delay = 0.5 * st.end_delay;
            if (it != instances.end()) {
              for (auto& [p, j] : it->second)
                peer_on_time |= p != w && stage2.group[p] == stage2.group[w] && stats(p, j).peers && stats(p, j).z_end <= t;
              if (!peer_on_time)
                for (auto& [p, j] : it->second)
                  if (p != w && stats(p, j).peers && stats(p, j).start_delay >= latest_delay) {
                    latest = {p, j};
                    latest_delay = stats(p, j).start_delay;
                  }
            }
            if (latest.first >= 0) {
              w = latest.first;
              i = latest.second;
              mode = Mode::started_late;
              continue;
            }
          }
          return Culprit{CauseKind::communication_link, w, -1, i, double(st.end_delay) - std::max(0.f, st.start_delay),
                         st.z_end};
        }
        case Mode::started_late: {
          const int64_t p = predecessor(ops, i);
          if (p < 0) return Culprit{CauseKind::dependency_edge, w, -1, i, st.start_delay, st.z_start};
          const OpStats& ps = stats(w, static_cast<uint32_t>(p));
          // An operation that no peer runs is extra work on this worker (an injected or divergent kernel):
          // when it is long enough to explain the late start, it is a compute culprit, not the edge after it.
          if (!ps.peers && !is_communication(ops[p].kind) &&
              static_cast<double>(ops[p].duration_ns) >= 0.5 * st.start_delay)
            return Culprit{CauseKind::compute_operator, w, -1, static_cast<uint32_t>(p),
                           static_cast<double>(ops[p].duration_ns), st.z_start};
          if (ps.peers && ps.end_delay > 0 && ps.end_delay >= 0.5 * st.start_delay) {
            i = static_cast<uint32_t>(p);
            mode = Mode::ended_late;
            continue;
          }
          // The predecessor finished on time, yet this one started late: the edge between them. The edge cannot
          // have added more than the worker's own idle gap between the two: where many same-named ops run in a
          // step (a profiler's aten::zeros / aten::zero_ pairs), an instance matched to a peer's other instance
          // shows a late start that an earlier long operator caused, with no gap before it.
          const double gap = static_cast<double>(op.start_ns - ops[p].end_ns());
          return Culprit{CauseKind::dependency_edge, w, p, i,
                         std::min(gap, double(st.start_delay) - std::max(0.f, ps.end_delay)), st.z_start};
        }
      }
    }
    return std::nullopt;
  };

  // Every figure stays within what was observed: no cause can have cost more than the time recorded.
  int64_t t_lo = INT64_MAX, t_hi = INT64_MIN;
  for (auto& w : set.workers)
    for (auto& op : w.ops) {
      t_lo = std::min(t_lo, op.start_ns);
      t_hi = std::max(t_hi, op.end_ns());
    }
  const double span = t_hi > t_lo ? double(t_hi - t_lo) : 0.0;
  std::map<std::tuple<int, int, std::string>, RootCause> causes;
  std::set<std::tuple<int, int64_t, uint32_t>> counted;  // culprit instances whose excess is already summed
  const size_t limit = std::min<size_t>(stage2.flagged.size(), 200000);
  for (size_t f = 0; f < limit; ++f) {
    auto c = walk(stage2.flagged[f].worker, stage2.flagged[f].op);
    if (!c) continue;
    const auto& ops = set.workers[c->worker].ops;
    std::string what = set.names[ops[c->op].name];
    if (c->kind == CauseKind::dependency_edge)
      what = (c->pred >= 0 ? set.names[ops[c->pred].name] : std::string("(trace start)")) + " -> " + what;
    auto& rc = causes[{static_cast<int>(c->kind), c->worker, what}];
    rc.kind = c->kind;
    rc.worker = c->worker;
    rc.operation = what;
    rc.victims++;
    if (counted.insert({c->worker, c->pred, c->op}).second) {
      // A compute operator cannot have added more than it lasted.
      const double cap = c->kind == CauseKind::compute_operator ? double(ops[c->op].duration_ns) : span;
      rc.excess_ns = std::min(span, rc.excess_ns + std::clamp(c->excess, 0.0, cap));
      rc.steps.push_back(ops[c->op].step);
      rc.z = std::max(rc.z, c->z);
    }
  }
  std::vector<RootCause> out;
  for (auto& [key, rc] : causes) {
    std::sort(rc.steps.begin(), rc.steps.end());
    rc.steps.erase(std::unique(rc.steps.begin(), rc.steps.end()), rc.steps.end());
    char buf[256];
    const char* what = rc.kind == CauseKind::compute_operator     ? "operator ran long"
                       : rc.kind == CauseKind::communication_link ? "communication took long with all participants on time"
                                                                  : "started late although its predecessor ended on time";
    std::snprintf(buf, sizeof buf, "%s: +%.3f ms over %zu step(s), z up to %.1f, %d flagged operation(s) lead here",
                  what, rc.excess_ns / 1e6, rc.steps.size(), rc.z, rc.victims);
    rc.evidence = buf;
    out.push_back(std::move(rc));
  }
  // Rank by the delay each cause added over the trace, counting half of it for a sporadic cause (one seen in
  // fewer than 3/4 of the analysed steps): a busy host stalls now and then on any rank, a slow operator or link
  // costs in nearly every step. Among sporadic causes the delay alone decides, with no finer recurrence weight:
  // among hundreds of workers some worker always collects a few ordinary hiccups (1.2-1.5x) on one operator,
  // and that pile must not beat a real stall (2.5x and more) that hit one step.
  std::set<int32_t> all_steps;
  for (auto& w : set.workers)
    for (auto& op : w.ops)
      if (op.step >= 0) all_steps.insert(op.step);
  for (auto& rc : out) rc.score = rc.excess_ns * (4 * rc.steps.size() >= 3 * all_steps.size() ? 1.0 : 0.5);
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.score > b.score; });
  if (out.size() > options.max_root_causes) out.resize(options.max_root_causes);
  return out;
}

}  // namespace stackscope::analyze
