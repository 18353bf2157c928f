#include "analyze/metrics/classification_metrics.h"

#include <stdexcept>
#include <string>

namespace stackscope::analyze {

ClassificationMetrics classification_metrics(std::span<const int> labels, std::span<const int> predictions) {
  if (labels.size() != predictions.size())
    throw std::invalid_argument("classification metrics: " + std::to_string(labels.size()) + " labels but " +
                                std::to_string(predictions.size()) + " predictions");
  if (labels.empty()) throw std::invalid_argument("classification metrics: no labels");
  ClassificationMetrics m;
  for (size_t i = 0; i < labels.size(); ++i) {
    const bool y = labels[i] != 0, p = predictions[i] != 0;
    if (y && p) ++m.true_positives;
    else if (!y && p) ++m.false_positives;
    else if (!y && !p) ++m.true_negatives;
    else ++m.false_negatives;
  }
  const double tp = static_cast<double>(m.true_positives);
  m.accuracy = static_cast<double>(m.true_positives + m.true_negatives) / static_cast<double>(labels.size());
  const double pp = tp + static_cast<double>(m.false_positives), ap = tp + static_cast<double>(m.false_negatives);
  m.precision = pp > 0 ? tp / pp : 0.0;
  m.recall = ap > 0 ? tp / ap : 0.0;
  m.f1 = (m.precision + m.recall) > 0 ? 2 * m.precision * m.recall / (m.precision + m.recall) : 0.0;
  return m;
}

}  // namespace stackscope::analyze
