// stackscope export REC... --format csv|perfetto|chrome-json : the recording in a format other tools open.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "analyze/incidents/incident_engine.h"
#include "store/recording_incident_input.h"
#include "cli/registry.h"
#include "export/exporters.h"
#include "store/errors.h"
#include "store/output_file.h"

namespace stackscope::cli {
namespace {

struct ExportCliOptions {
  std::vector<std::string> recordings;
  std::string format;
  std::string output;  // empty or "-": stdout
  std::vector<std::string> layers;
  std::string series;
  std::string what = "events";  // csv: events | samples | both
  bool quiet = false;
  bool derived = true;
  bool incidents = true;  // perfetto: run the incident engine and put its incidents on the timeline
};

// The output file (store/output_file.h: never an input, never through a symlink, replaced only once written),
// or nothing for stdout.
std::unique_ptr<OutputFile> open_output(const std::string& path, const std::vector<std::string>& inputs) {
  if (path.empty() || path == "-") return nullptr;
  return std::make_unique<OutputFile>(path, OutputFileOptions{.inputs = inputs});
}

void finish(std::ostream& out, const std::string& path) {
  out.flush();
  if (!out) throw std::runtime_error("write failed: " + (path.empty() ? std::string("stdout") : path));
}

int run_export(const ExportCliOptions& opt) {
  try {
    ExportOptions eo;
    std::string layer_list;
    for (auto& l : opt.layers) layer_list += (layer_list.empty() ? "" : ",") + l;
    if (!layer_list.empty()) eo.layers = parse_layer_list(layer_list);
    eo.series_pattern = opt.series;
    eo.derived = opt.derived;

    // Every output is checked before any input is read.
    std::unique_ptr<OutputFile> file, samples_file;
    if (opt.format == "csv" && opt.what == "both" && !opt.output.empty() && opt.output != "-") {
      file = open_output(opt.output + ".events.csv", opt.recordings);
      samples_file = open_output(opt.output + ".samples.csv", opt.recordings);
    } else {
      file = open_output(opt.output, opt.recordings);
    }
    std::vector<std::unique_ptr<RecordingReader>> readers;
    std::vector<const RecordingReader*> views;
    for (auto& p : opt.recordings) {
      readers.push_back(std::make_unique<RecordingReader>(p));
      views.push_back(readers.back().get());
    }
    ExportCounts c;
    if (opt.format == "csv") {
      if (views.size() != 1)
        throw std::invalid_argument("csv takes one recording (got " + std::to_string(views.size()) +
                                    "); export each on its own, or use --format perfetto to merge ranks");
      if (opt.what == "both") {
        if (opt.output.empty() || opt.output == "-")
          throw std::invalid_argument("--what both writes two files: give -o OUT (makes OUT.events.csv, OUT.samples.csv)");
        c.rows = export_csv_events(*views[0], eo, file->stream()).rows;
        c.rows += export_csv_samples(*views[0], eo, samples_file->stream()).rows;
        file->commit();
        samples_file->commit();
      } else {
        auto& out = file ? file->stream() : std::cout;
        c = opt.what == "samples" ? export_csv_samples(*views[0], eo, out) : export_csv_events(*views[0], eo, out);
        finish(out, opt.output);
        if (file) file->commit();
      }
      if (!opt.quiet) std::fprintf(stderr, "stackscope export: %llu rows\n", static_cast<unsigned long long>(c.rows));
      return 0;
    }
    bool binary = opt.format == "perfetto";
    if (binary && opt.incidents)
      for (const RecordingReader* r : views) {
        // As `analyze` finds them (store/recording_incident_input.h); a recording the engine cannot read exports
        // without.
        try {
          eo.incidents.push_back(analyze::incidents::find_incidents(read_incident_input(*r).input).incidents);
        } catch (const std::invalid_argument&) {
          eo.incidents.emplace_back();
        }
      }
    if (binary && (opt.output.empty() || opt.output == "-") && ::isatty(STDOUT_FILENO))
      throw std::invalid_argument("perfetto output is binary: give -o FILE.perfetto-trace (or redirect stdout)");
    auto& out = file ? file->stream() : std::cout;
    c = binary ? export_perfetto(views, eo, out) : export_chrome_json(views, eo, out);
    finish(out, opt.output);
    if (file) file->commit();
    if (!opt.quiet)
      std::fprintf(stderr,
                   "stackscope export: %llu slices, %llu instants, %llu counter tracks (%llu points), %llu flows, "
                   "%llu stack samples, %llu incidents\n",
                   static_cast<unsigned long long>(c.slices), static_cast<unsigned long long>(c.instants),
                   static_cast<unsigned long long>(c.counter_tracks), static_cast<unsigned long long>(c.counter_points),
                   static_cast<unsigned long long>(c.flows), static_cast<unsigned long long>(c.stack_samples),
                   static_cast<unsigned long long>(c.incidents));
    return 0;
  } catch (const RecordingError& e) {
    std::fprintf(stderr, "stackscope export: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stackscope export: %s\n", e.what());
  }
  return 1;
}

RegisterCommand reg("export", 40, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<ExportCliOptions>();
  auto* cmd = app.add_subcommand("export", "Write recordings as CSV, a Perfetto trace or Chrome trace JSON");
  cmd->add_option("recordings", opt->recordings, "Recording file(s); several merge (clock-aligned) for perfetto/chrome-json")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--format", opt->format, "csv | perfetto | chrome-json")
      ->required()
      ->check(CLI::IsMember({"csv", "perfetto", "chrome-json"}));
  cmd->add_option("-o,--output", opt->output, "Output file (default stdout; csv --what both: prefix)");
  cmd->add_option("--layers", opt->layers, "Event layers to export (cuda,nccl,torch,python,kernel,nvml,host or all)")
      ->delimiter(',');
  cmd->add_option("--series", opt->series, "Only series whose key or name matches this glob (\"gpu.*\")");
  cmd->add_option("--what", opt->what, "csv only: events | samples | both (both: OUT.events.csv and OUT.samples.csv)")
      ->check(CLI::IsMember({"events", "samples", "both"}));
  cmd->add_flag("!--no-derived", opt->derived, "Leave out derived series (counter rates, utilisations)");
  cmd->add_flag("!--no-incidents", opt->incidents, "perfetto: leave out the incident track (skips the incident engine)");
  cmd->add_flag("-q,--quiet", opt->quiet, "No summary on stderr");
  cmd->footer(
      "Examples:\n"
      "  stackscope export run.sdb --format perfetto -o run.perfetto-trace   (open in ui.perfetto.dev)\n"
      "  stackscope export rank0.sdb rank1.sdb --format perfetto -o job.perfetto-trace\n"
      "  stackscope export run.sdb --format csv --what samples --series 'gpu.*' > gpu.csv\n"
      "Host-enqueue calls (kernel launches, async copies, NCCL calls) are named '... (enqueue)', category\n"
      "'enqueue': their duration is CPU time to enqueue, never GPU execution time.");
  cmd->callback([opt, &exit_code] { exit_code = run_export(*opt); });
});

}  // namespace
}  // namespace stackscope::cli
