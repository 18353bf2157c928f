// PyTorch profiler (Kineto) Chrome-trace JSON, one file per rank (optionally gzip-compressed), read into a
// worker timeline for straggler analysis. With GPU kernels the timeline is the GPU's (kernels, copies; NCCL
// kernels are the collectives), each assigned to the ProfilerStep whose CPU span launched it; without
// kernels (CPU training, gloo) it is the top-level CPU operators of each thread, `c10d::`/`gloo:`/`nccl:`
// operators being the collectives.
#pragma once
#include <string>

#include "model/worker_timeline.h"

namespace stackscope {

// Appends one worker to `set` (a profiler trace of one rank), or one worker per process of a whole-job Chrome
// trace (several pids holding operations, none of Kineto's categories: a merged or converted trace, any
// categories; each pid a rank, named by its process_name metadata when it says "rank N"). Throws
// std::runtime_error naming the file and the defect.
void read_kineto_trace(const std::string& path, TimelineSet& set);
// True when the file looks like a Kineto/Chrome trace (".json" or ".json.gz" holding "traceEvents").
bool looks_like_kineto_trace(const std::string& path);
// What a straggler input is, from its first bytes (not its name).
enum class TraceInputFormat { recording, chrome_json, step_table, parquet, unknown };
TraceInputFormat sniff_trace_input(const std::string& path);
// The formats `stragglers` reads, for error messages.
inline constexpr const char* kSupportedTraceInputs =
    "stackscope recordings (record's .sdb), Chrome / PyTorch-profiler (Kineto) JSON traces (.json or .json.gz: "
    "one per rank, or one holding every rank as its own pid), step-time tables (CSV with columns worker, step, time)";
// Whole file, inflated when it is gzip/zlib (magic 1f 8b or 78 xx). Throws std::runtime_error, also when it
// would inflate past 64 MiB and 100 times its compressed size (a decompression bomb).
std::string read_maybe_compressed(const std::string& path);

}  // namespace stackscope
