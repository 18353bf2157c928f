// Shared by the agent's tests: a node's sink that counts samples by series key, this test process as a traced job,
// and the samples of a series in a job's segments.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "agent/job_discovery.h"
#include "model/sink.h"
#include "store/recording_reader.h"

namespace stackscope::agent::testing {

// Counts samples by series key; the node's segments stand-in.
class CountingSink : public TelemetrySink {
 public:
  SeriesId add_series(const SeriesInfo& info) override {
    std::lock_guard lk(mu_);
    keys_.push_back(info.key());
    return static_cast<SeriesId>(keys_.size());
  }
  void append_event(Event&&) override {}
  void append_samples(std::span<const Sample> s) override {
    std::lock_guard lk(mu_);
    for (auto& x : s) ++counts_[keys_.at(x.series - 1)];
  }
  void add_drops(std::string_view, uint64_t) override {}
  void add_note(std::string_view, std::string_view) override {}
  size_t count(const std::string& key) {
    std::lock_guard lk(mu_);
    return counts_[key];
  }

 private:
  std::mutex mu_;
  std::vector<std::string> keys_;
  std::map<std::string, size_t> counts_;
};

inline Job this_process_as_job(uint64_t start_ticks) {  // start_ticks: a directory of its own
  Job j;
  j.leader = static_cast<uint32_t>(::getpid());
  j.id = std::to_string(j.leader) + "-" + std::to_string(start_ticks);
  j.name = "test-" + std::to_string(j.leader);
  j.command = "stackscope_agent_tests";
  JobProcess p;
  p.pid = j.leader;
  p.start_ticks = start_ticks;
  p.comm = "agent_tests";
  j.processes[j.leader] = p;
  return j;
}

// Samples of `key` in the job's segments.
inline size_t samples_in(const std::string& dir, const std::string& key, std::vector<Note>* notes = nullptr) {
  size_t n = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.path().extension() == ".sdb") {
      RecordingReader r(e.path().string());
      for (auto& [id, tv] : r.load_samples())
        if (auto* s = r.series_by_id(id); s && s->key() == key) n += tv.first.size();
      if (notes)
        for (auto& note : r.notes()) notes->push_back(note);
    }
  return n;
}

}  // namespace stackscope::agent::testing
