// Validation shared by every detector: bad input becomes a DetectorInputError naming the row or column,
// never NaN scores or a crash further down.
#pragma once
#include <Eigen/Dense>
#include <string_view>

#include "analyze/detectors/detector.h"

namespace stackscope::analyze {

// Throws unless `x` has at least `min_rows` rows, at least one column and only finite values.
// `who` prefixes the message ("isolation forest fit").
void require_finite_matrix(const Eigen::MatrixXd& x, std::string_view who, Eigen::Index min_rows = 1);
// Throws unless `x` has exactly `expected_cols` columns (what the model was fitted on) and finite values.
void require_scoring_input(const Eigen::MatrixXd& x, Eigen::Index expected_cols, std::string_view who);

}  // namespace stackscope::analyze
