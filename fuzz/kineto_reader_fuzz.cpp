// libFuzzer over the Kineto / Chrome-trace reader (`stragglers` input): JSON or gzip bytes of any shape, a
// profiler trace of one rank or a whole job's. It must throw (the CLI turns that into a clear error) or give a
// timeline, never crash, hang, or inflate without bound.
#include <cstdint>
#include <exception>

#include "fuzz_input_file.h"
#include "store/kineto_trace_reader.h"

using namespace stackscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInputFile file(data, size, ".json");
  if (!file.ok()) return 0;
  (void)sniff_trace_input(file.path());
  (void)looks_like_kineto_trace(file.path());
  TimelineSet set;
  try {
    read_kineto_trace(file.path(), set);
  } catch (const std::exception&) {  // runtime_error for defects it names, nlohmann's for a value of a wrong type
    return 0;
  }
  for (const auto& w : set.workers)
    for (const auto& op : w.ops)
      if (op.duration_ns < 0) __builtin_trap();  // the reader clamps durations
  return 0;
}
