// Writes a synthetic recording of a busy data-parallel GPU training job through RecordingWriter, shaped like what
// `stackscope record` stores (same event names, argument keys, flags, nesting depths, block sizes, series names
// and sampling periods), deterministic from a seed. It exists to measure and test reading and windowing at
// sizes no CI machine can record (an hour of a GPU job: about 60 M events), see bench/analyze_scale_bench.cpp.
//
// The job: training steps of `step_s`; per step the main thread copies a batch to the GPU, runs the forward
// pass (nested torch operators, each leaf launching CUDA kernels), the autograd thread runs the backward pass
// and enqueues gradient all-reduces (NCCL), the main thread runs the optimizer and waits for the GPU
// (cudaStreamSynchronize). Python stack samples (on-CPU at `python_sample_hz`, off-CPU with their blocked time)
// come from the main thread and the data-loader worker processes. Host series (8 cpu.time counters per CPU
// plus memory, vm, network, disk, load and pressure series) and NVML series are sampled every `sample_period_s`.
// Episodes: a checkpoint pause every 600 s, a slowdown (steps 1.6x longer) at 30 % of the run and a data-loader
// stall at 60 %, so that the window tables have something to show.
#pragma once
#include <cstdint>
#include <string>

namespace stackscope {

struct SyntheticGpuJobOptions {
  double seconds = 3600;
  uint64_t seed = 1;
  double step_s = 0.1;
  double launches_per_s = 12'000;  // cudaLaunchKernel
  double torch_ops_per_s = 4'000;  // torch operator events (all depths)
  size_t kernel_names = 300;
  size_t cpus = 32;  // host series: 8 per CPU plus 54 others (310 at 32 CPUs)
  double sample_period_s = 0.1;
  double python_sample_hz = 99;
  size_t loader_workers = 4;
  int64_t first_ns = 1'000'000'000'000;  // CLOCK_MONOTONIC of the first step (fixed: same seed, same file)
  uint32_t pid = 4242;
};

struct SyntheticGpuJobSummary {
  uint64_t events = 0, samples = 0;
  size_t series = 0;
  int64_t first_ns = 0, last_ns = 0;
};

// Creates (or truncates) `path`. Throws what RecordingWriter throws, or std::runtime_error when events were
// dropped (the generator outran the writer).
SyntheticGpuJobSummary write_synthetic_gpu_job(const std::string& path, const SyntheticGpuJobOptions& options);

}  // namespace stackscope
