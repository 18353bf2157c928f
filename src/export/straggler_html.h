// A self-contained HTML page for a straggler report: the stage-1 heatmaps (S_A per worker and window, the
// pairwise K-S matrix), KAIR's Fig. 4 frequency timeline (operations completed per time bin and worker; step
// times for step tables), the root causes and the flagged operations. Inline SVG only: no scripts, no
// external resources. Every heatmap has its colour scale (what white and dark red mean, in the heatmap's own
// units), tick labels on its axes (steps, seconds, workers) and workers named and ordered by rank.
#pragma once
#include <string>

#include "analyze/stragglers/straggler.h"

namespace stackscope {

// The whole page.
std::string straggler_html(const analyze::StragglerReport& report, const std::string& title);
// The same content without <html>/<body>, for embedding in another page (stackscope report).
std::string straggler_html_body(const analyze::StragglerReport& report);

}  // namespace stackscope
