#include "analyze/stragglers/straggler_sim.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <unordered_map>

namespace stackscope::analyze {

const char* sim_fault_name(SimFaultKind k) {
  switch (k) {
    case SimFaultKind::slow_compute: return "slow-compute";
    case SimFaultKind::slow_link: return "slow-link";
    case SimFaultKind::late_start: return "late-start";
    case SimFaultKind::intermittent_stall: return "intermittent-stall";
  }
  return "?";
}

namespace {

class Simulator {
 public:
  explicit Simulator(const SimOptions& o) : o_(o), rng_(o.seed) {
    set_.workers.resize(o.workers);
    skew_.resize(o.workers);
    std::uniform_real_distribution<double> skew(-1, 1);
    for (int w = 0; w < o.workers; ++w) {
      set_.workers[w].worker = "rank" + std::to_string(w);
      set_.workers[w].rank = w;
      skew_[w] = static_cast<int64_t>(skew(rng_) * double(o.max_clock_skew_ns));
    }
    clock_.assign(o.workers, 1'000'000'000);
    stall_.assign(o.workers, std::vector<bool>(o.steps, false));
    std::uniform_real_distribution<double> u(0, 1);
    for (auto& f : o.faults)
      if (f.kind == SimFaultKind::intermittent_stall && f.worker < o.workers) {
        bool any = false;
        for (int s = 0; s < o.steps; ++s) any |= stall_[f.worker][s] = u(rng_) < f.probability;
        if (!any) stall_[f.worker][std::uniform_int_distribution<int>(0, o.steps - 1)(rng_)] = true;
      }
  }

  TimelineSet run() {
    if (o_.parallelism == SimOptions::Parallelism::data)
      run_data_parallel();
    else
      run_pipeline();
    return std::move(set_);
  }

 private:
  double noisy(double base) {
    double d = base * std::max(0.2, 1 + o_.noise * normal_(rng_));
    if (unit_(rng_) < o_.hiccup_rate) d *= 1.2 + 0.3 * unit_(rng_);
    return d;
  }
  double fault_factor(int w, int slot, int step) const {
    double f = 1;
    for (auto& x : o_.faults)
      if (x.worker == w && x.op == slot &&
          (x.kind == SimFaultKind::slow_compute || (x.kind == SimFaultKind::intermittent_stall && stall_[w][step])))
        f *= x.factor;
    return f;
  }
  int64_t fault_delay(int w, SimFaultKind kind) const {
    int64_t d = 0;
    for (auto& x : o_.faults)
      if (x.worker == w && x.kind == kind) d += x.delay_ns;
    return d;
  }
  void emit(int w, uint32_t name, OpKind kind, int64_t start, int64_t dur, uint32_t comm = 0, int64_t seq = -1,
            int64_t bytes = 0) {
    TimelineOp op;
    op.name = name;
    op.kind = kind;
    op.start_ns = start + skew_[w];
    op.duration_ns = std::max<int64_t>(dur, 1000);
    op.stream = 0;
    op.comm = comm;
    op.collective_seq = seq;
    op.bytes = bytes;
    set_.workers[w].ops.push_back(op);
  }
  void compute(int w, uint32_t name, double base, int slot, int step) {
    const int64_t d = static_cast<int64_t>(noisy(base) * fault_factor(w, slot, step));
    emit(w, name, OpKind::compute, clock_[w], d);
    clock_[w] += d + gap();
  }
  int64_t gap() { return 5'000 + static_cast<int64_t>(10'000 * unit_(rng_)); }
  // A collective among `members`: ends together after the last arrival, plus each member's link delay.
  void collective(const std::vector<int>& members, uint32_t name, uint32_t comm, int64_t transfer, int64_t bytes) {
    int64_t last = INT64_MIN;
    for (int w : members) last = std::max(last, clock_[w]);
    const int64_t done = last + static_cast<int64_t>(noisy(double(transfer)));
    const int64_t seq = seq_[comm]++;
    for (int w : members) {
      // A slow link costs in proportion to the bytes it carries: small collectives barely notice it.
      const int64_t slow = static_cast<int64_t>(double(fault_delay(w, SimFaultKind::slow_link)) * double(bytes) / (25 << 20));
      const int64_t end = done + static_cast<int64_t>(20'000 * unit_(rng_)) + slow;
      emit(w, name, OpKind::collective, clock_[w], end - clock_[w], comm, seq, bytes);
      clock_[w] = end + gap();
    }
  }
  // Blocking send from a to b: both end when the transfer is done (a slow link of either end delays it).
  void p2p(int a, int b, uint32_t send, uint32_t recv, uint32_t comm, int64_t transfer) {
    const int64_t start = std::max(clock_[a], clock_[b]);
    const int64_t done = start + static_cast<int64_t>(noisy(double(transfer))) +
                         fault_delay(a, SimFaultKind::slow_link) + fault_delay(b, SimFaultKind::slow_link);
    const int64_t seq = seq_[comm]++;
    emit(a, send, OpKind::p2p, clock_[a], done - clock_[a], comm, seq, 1 << 20);
    emit(b, recv, OpKind::p2p, clock_[b], done - clock_[b], comm, seq, 1 << 20);
    clock_[a] = done + gap();
    clock_[b] = done + gap();
  }
  void step_begin(int w, int step) {
    clock_[w] += fault_delay(w, SimFaultKind::late_start) + gap();
    step_start_[w] = clock_[w];
    (void)step;
  }
  void step_end(int w, int step) {
    if (o_.markers)
      set_.workers[w].markers.push_back({step, step_start_[w] + skew_[w] - 1000, clock_[w] + skew_[w]});
  }

  void run_data_parallel() {
    const int half = std::max(1, o_.compute_ops / 2);
    const int buckets = std::clamp(o_.buckets, 1, half);
    std::vector<uint32_t> fwd, bwd;
    std::vector<double> fwd_base, bwd_base;
    for (int j = 0; j < half; ++j) {
      fwd.push_back(set_.intern("forward.layer" + std::to_string(j)));
      bwd.push_back(set_.intern("backward.layer" + std::to_string(half - 1 - j)));
      fwd_base.push_back(double(o_.op_ns) * (0.5 + unit_(rng_)));
      bwd_base.push_back(double(o_.op_ns) * (1.0 + unit_(rng_)));
    }
    const uint32_t opt = set_.intern("optimizer.step"), ar = set_.intern("ncclAllReduce"), comm = set_.intern("dp");
    std::vector<int> all(o_.workers);
    for (int w = 0; w < o_.workers; ++w) all[w] = w;
    step_start_.assign(o_.workers, 0);
    for (int s = 0; s < o_.steps; ++s) {
      for (int w = 0; w < o_.workers; ++w) {
        step_begin(w, s);
        for (int j = 0; j < half; ++j) compute(w, fwd[j], fwd_base[j], j, s);
      }
      int done = 0;
      for (int b = 0; b < buckets; ++b) {
        const int until = half * (b + 1) / buckets;
        for (int w = 0; w < o_.workers; ++w)
          for (int j = done; j < until; ++j) compute(w, bwd[j], bwd_base[j], half + j, s);
        done = until;
        collective(all, ar, comm, o_.transfer_ns, b + 1 < buckets ? 25 << 20 : 10 << 20);
      }
      // Gradient-norm clipping: a tiny all-reduce before the optimizer.
      collective(all, ar, comm, o_.transfer_ns / 20, 8);
      for (int w = 0; w < o_.workers; ++w) {
        compute(w, opt, double(o_.op_ns) * 0.5, 2 * half, s);
        step_end(w, s);
      }
    }
  }

  void run_pipeline() {
    const int stages = std::max(1, o_.stages), replicas = std::max(1, o_.workers / stages);
    const int m_count = std::max(1, o_.micro_batches);
    const uint32_t f = set_.intern("forward"), b = set_.intern("backward"), send = set_.intern("nccl:send"),
                   recv = set_.intern("nccl:recv"), ar = set_.intern("ncclAllReduce"), opt = set_.intern("optimizer.step");
    std::vector<uint32_t> link(replicas * stages), dp(stages);
    for (int r = 0; r < replicas; ++r)
      for (int s = 0; s + 1 < stages; ++s)
        link[r * stages + s] = set_.intern("pp r" + std::to_string(r) + " " + std::to_string(s) + "-" + std::to_string(s + 1));
    for (int s = 0; s < stages; ++s) dp[s] = set_.intern("dp stage" + std::to_string(s));
    std::vector<double> fb(stages), bb(stages);
    for (int s = 0; s < stages; ++s) {
      fb[s] = double(o_.op_ns) * (0.8 + 0.4 * unit_(rng_));
      bb[s] = 2 * fb[s];
    }
    step_start_.assign(o_.workers, 0);
    for (int step = 0; step < o_.steps; ++step) {
      for (int w = 0; w < replicas * stages; ++w) step_begin(w, step);
      for (int r = 0; r < replicas; ++r) {
        const int base = r * stages;
        for (int m = 0; m < m_count; ++m)
          for (int s = 0; s < stages; ++s) {
            if (s > 0) p2p(base + s - 1, base + s, send, recv, link[base + s - 1], o_.transfer_ns / 3);
            compute(base + s, f, fb[s], m, step);
          }
        for (int m = 0; m < m_count; ++m)
          for (int s = stages - 1; s >= 0; --s) {
            if (s < stages - 1) p2p(base + s + 1, base + s, send, recv, link[base + s], o_.transfer_ns / 3);
            compute(base + s, b, bb[s], m_count + m, step);
          }
      }
      for (int s = 0; s < stages; ++s) {
        std::vector<int> members;
        for (int r = 0; r < replicas; ++r) members.push_back(r * stages + s);
        collective(members, ar, dp[s], o_.transfer_ns, 25 << 20);
      }
      for (int w = 0; w < replicas * stages; ++w) {
        compute(w, opt, double(o_.op_ns) * 0.5, 2 * m_count, step);
        step_end(w, step);
      }
    }
  }

  const SimOptions& o_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_{0, 1};
  std::uniform_real_distribution<double> unit_{0, 1};
  TimelineSet set_;
  std::vector<int64_t> skew_, clock_, step_start_;
  std::vector<std::vector<bool>> stall_;
  std::unordered_map<uint32_t, int64_t> seq_;
};

}  // namespace

TimelineSet simulate_training(const SimOptions& options) { return Simulator(options).run(); }

StepTimeTable simulate_step_times(int workers, int steps, const std::vector<SimFault>& faults, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> unit(0, 1);
  StepTimeTable t;
  for (int s = 0; s < steps; ++s) t.steps.push_back(s);
  for (int w = 0; w < workers; ++w) {
    t.workers.push_back(std::to_string(w));
    const double speed = 0.97 + 0.1 * unit(rng);  // other hardware, other data shards
    std::vector<double> row(steps);
    for (int s = 0; s < steps; ++s) row[s] = 100.0 * speed * std::max(0.5, 1 + 0.03 * normal(rng));
    t.time.push_back(std::move(row));
  }
  for (auto& f : faults) {
    if (f.worker >= workers) continue;
    for (int s = 0; s < steps; ++s)
      if (f.kind != SimFaultKind::intermittent_stall || unit(rng) < f.probability) t.time[f.worker][s] *= f.factor;
  }
  return t;
}

}  // namespace stackscope::analyze
