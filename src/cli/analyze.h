// `stackscope analyze`: one command, several analyses over recordings. Each analysis lives in its own file
// (analyze_gmm.cpp: eACGM per-layer GMM; analyze_reveal.cpp: Reveal host-telemetry pipeline).
#pragma once
#include <string>
#include <vector>

namespace stackscope::cli {

struct AnalyzeOptions {
  std::vector<std::string> recordings;
  std::vector<std::string> layers;  // empty: all
  std::string detector = "all";     // gmm | reveal | all
  bool json = false;
  bool store = true;                // write findings back into the recording(s)
  std::string report_html;          // optional HTML report path
};

// Each returns a process exit status and prints its part of the report (or JSON object when json).
int analyze_gmm(const AnalyzeOptions& options);
int analyze_reveal(const AnalyzeOptions& options);

}  // namespace stackscope::cli
