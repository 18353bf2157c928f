// A self-contained HTML page for a straggler report: the stage-1 heatmaps (S_A per worker and window, the
// pairwise K-S matrix), KAIR's Fig. 4 frequency timeline (operations completed per time bin and worker; step
// times for step tables), the root causes and the flagged operations. Inline SVG only: no scripts, no
// external resources.
#pragma once
#include <string>

#include "analyze/stragglers/straggler.h"

namespace stackscope {

std::string straggler_html(const analyze::StragglerReport& report, const std::string& title);

}  // namespace stackscope
