// Placeholder until the reveal analysis lands; it says so instead of pretending to analyse.
#include "cli/analyze.h"

namespace stackscope::cli {
AnalysisOutput analyze_reveal(const AnalyzeOptions&) {
  AnalysisOutput out;
  out.text = "reveal analysis: not available in this build\n";
  out.json = {{"available", false}};
  out.status = 0;
  return out;
}
}  // namespace stackscope::cli
