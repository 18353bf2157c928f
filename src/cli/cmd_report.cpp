// stackscope report REC... -o report.html : one self-contained HTML page per job (export/report_html.h). Each
// recording goes through the incident engine exactly as `analyze` reads it (store/recording_incident_input.h),
// nothing is written back into the recordings; several recordings of one job (one per rank) add KAIR's straggler
// view.
#include <cstdio>
#include <memory>

#include "analyze/incidents/incident_engine.h"
#include "analyze/stragglers/straggler.h"
#include "store/recording_incident_input.h"
#include "cli/registry.h"
#include "export/report_html.h"
#include "store/errors.h"
#include "store/output_file.h"
#include "store/recording_timeline_reader.h"

namespace stackscope::cli {
namespace {

struct ReportCliOptions {
  std::vector<std::string> recordings;
  std::string output;
  std::string title = "stackscope report";
  double window_s = 1.0;
  size_t top = 12;
  bool quiet = false;
};

int run_report(const ReportCliOptions& opt) {
  try {
    // Checked before any recording is read (store/output_file.h): never one of them, never through a symbolic
    // link, and an existing page is replaced only once the new one is written.
    OutputFile out(opt.output, {.inputs = opt.recordings});
    struct Analysed {
      std::unique_ptr<RecordingReader> reader;
      RecordingIncidentInput input;
      analyze::incidents::IncidentReport report;
    };
    std::vector<Analysed> analysed;
    for (const auto& path : opt.recordings) {
      Analysed a;
      a.reader = std::make_unique<RecordingReader>(path);
      a.input = read_incident_input(*a.reader, opt.window_s);
      a.report = analyze::incidents::find_incidents(a.input.input);
      analysed.push_back(std::move(a));
    }
    std::vector<ReportRecording> recs;
    size_t incidents = 0;
    for (const auto& a : analysed) {
      recs.push_back({a.reader.get(), &a.input.input, &a.report, a.input.start_ns, a.input.end_ns,
                      a.input.realtime_offset_ns});
      incidents += a.report.incidents.size();
    }
    ReportOptions ro;
    ro.title = opt.title;
    ro.top = opt.top;
    analyze::StragglerReport stragglers;
    if (analysed.size() > 1) {
      try {
        TimelineSet set;
        for (const auto& path : opt.recordings) read_recording_timelines(path, set);
        if (set.workers.size() < 2) throw std::invalid_argument("fewer than 2 workers with collectives or operators");
        stragglers = analyze::analyze_stragglers(std::move(set));
        ro.stragglers = &stragglers;
      } catch (const std::exception& e) {
        ro.stragglers_note = std::string("No straggler analysis: ") + e.what();
      }
    }
    const std::string html = report_html(recs, ro);
    out.stream() << html;
    out.commit();
    if (!opt.quiet)
      std::fprintf(stderr, "stackscope report: %s (%zu recording%s, %zu incident%s, %zu bytes)\n", opt.output.c_str(),
                   recs.size(), recs.size() > 1 ? "s" : "", incidents, incidents == 1 ? "" : "s", html.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stackscope report: %s\n", e.what());
  }
  return 1;
}

RegisterCommand reg("report", 32, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<ReportCliOptions>();
  auto* cmd = app.add_subcommand("report", "Write a self-contained HTML report of recordings: job, progress, incidents, layers");
  cmd->add_option("recordings", opt->recordings, "Recording file(s); several ranks of one job add the straggler view")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", opt->output,
                  "HTML file to write (replaced once the report is written; never a recording given)")
      ->required();
  cmd->add_option("--title", opt->title, "Page title");
  cmd->add_option("--incident-window", opt->window_s, "Incident window length in seconds (as analyze --incident-window)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--top", opt->top, "Rows per summary table")->check(CLI::PositiveNumber);
  cmd->add_flag("-q,--quiet", opt->quiet, "No summary on stderr");
  cmd->footer(
      "Examples:\n"
      "  stackscope report run.sdb -o run.html              (open run.html in any browser; no network needed)\n"
      "  stackscope report rank0.sdb rank1.sdb -o job.html  (one section per rank, plus the straggler view)\n"
      "The recordings are only read: run `stackscope analyze` to store incidents as findings.");
  cmd->callback([opt, &exit_code] { exit_code = run_report(*opt); });
});

}  // namespace
}  // namespace stackscope::cli
