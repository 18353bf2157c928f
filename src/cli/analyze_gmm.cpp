// Placeholder until the gmm analysis lands; it says so instead of pretending to analyse.
#include "cli/analyze.h"

namespace stackscope::cli {
AnalysisOutput analyze_gmm(const AnalyzeOptions&) {
  AnalysisOutput out;
  out.text = "gmm analysis: not available in this build\n";
  out.json = {{"available", false}};
  out.status = 0;
  return out;
}
}  // namespace stackscope::cli
