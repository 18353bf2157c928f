// Accuracy, precision, recall and F1 of binary anomaly predictions against labels (1 = anomaly). Pure.
#pragma once
#include <cstddef>
#include <span>

namespace stackscope::analyze {

struct ClassificationMetrics {
  size_t true_positives = 0, false_positives = 0, true_negatives = 0, false_negatives = 0;
  double accuracy = 0;
  double precision = 0;  // 0 when nothing was predicted positive
  double recall = 0;     // 0 when there is no positive label
  double f1 = 0;
};

// Any non-zero value counts as "anomaly". Throws std::invalid_argument when the lengths differ or are 0.
ClassificationMetrics classification_metrics(std::span<const int> labels, std::span<const int> predictions);

}  // namespace stackscope::analyze
