// libFuzzer over the step-time table reader (`stragglers` CSV input: worker,step,time or the Alibaba PAI
// layout). Any bytes must give the reader's error or a table, never a crash, a hang or an unbounded allocation.
#include <cstdint>
#include <stdexcept>

#include "fuzz_input_file.h"
#include "store/step_table_reader.h"

using namespace stackscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInputFile file(data, size, ".csv");
  if (!file.ok()) return 0;
  (void)looks_like_step_table(file.path());
  try {
    const StepTimeTable t = read_step_table(file.path());
    if (t.time.size() != t.workers.size()) __builtin_trap();
    for (const auto& row : t.time)
      if (row.size() != t.steps.size()) __builtin_trap();  // [worker][step index]
    for (size_t i = 1; i < t.steps.size(); ++i)
      if (t.steps[i] <= t.steps[i - 1]) __builtin_trap();  // step labels ascending
  } catch (const std::runtime_error&) {
  }
  return 0;
}
