#include "analyze/detectors/input_checks.h"

#include <cmath>
#include <string>

namespace stackscope::analyze {

void require_finite_matrix(const Eigen::MatrixXd& x, std::string_view who, Eigen::Index min_rows) {
  const std::string w(who);
  if (x.cols() == 0) throw DetectorInputError(w + ": input has no columns");
  if (x.rows() < min_rows)
    throw DetectorInputError(w + ": needs at least " + std::to_string(min_rows) + " rows, got " +
                             std::to_string(x.rows()));
  if (x.allFinite()) return;  // fast path; the loop below only runs to name the culprit
  for (Eigen::Index c = 0; c < x.cols(); ++c)
    for (Eigen::Index r = 0; r < x.rows(); ++r)
      if (!std::isfinite(x(r, c)))
        throw DetectorInputError(w + ": row " + std::to_string(r) + ", column " + std::to_string(c) + " is " +
                                 (std::isnan(x(r, c)) ? "NaN" : "infinite") + " (0-based)");
}

void require_scoring_input(const Eigen::MatrixXd& x, Eigen::Index expected_cols, std::string_view who) {
  const std::string w(who);
  if (expected_cols == 0) throw DetectorInputError(w + ": score called before fit");
  if (x.cols() != expected_cols)
    throw DetectorInputError(w + ": input has " + std::to_string(x.cols()) + " columns, the model was fitted on " +
                             std::to_string(expected_cols));
  require_finite_matrix(x, who, 0);
}

}  // namespace stackscope::analyze
