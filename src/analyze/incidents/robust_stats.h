// Moved to analyze/robust_stats.h (shared with the straggler and reveal analyses); this forwarding header keeps
// the incident engine's includes and its incidents:: names working.
#pragma once
#include "analyze/robust_stats.h"

namespace stackscope::analyze::incidents {
using analyze::mean_of;
using analyze::median;
using analyze::quantile;
using analyze::robust_sd;
}  // namespace stackscope::analyze::incidents
