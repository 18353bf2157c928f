// stackscope export REC... --format csv|perfetto|chrome-json : the recording in a format other tools open.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "analyze/incidents/incident_engine.h"
#include "cli/incident_input.h"
#include "cli/registry.h"
#include "export/exporters.h"
#include "store/errors.h"

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

// Opens `path` for writing, or stdout; the error names the file.
std::ostream& open_output(const std::string& path, std::ofstream& file, bool binary) {
  if (path.empty() || path == "-") return std::cout;
  file.open(path, binary ? std::ios::binary | std::ios::trunc : std::ios::trunc);
  if (!file) throw std::runtime_error("cannot write " + path);
  return file;
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

    std::vector<std::unique_ptr<RecordingReader>> readers;
    std::vector<const RecordingReader*> views;
    for (auto& p : opt.recordings) {
      readers.push_back(std::make_unique<RecordingReader>(p));
      views.push_back(readers.back().get());
    }
    std::ofstream file;
    ExportCounts c;
    if (opt.format == "csv") {
      if (views.size() != 1)
        throw std::invalid_argument("csv takes one recording (got " + std::to_string(views.size()) +
                                    "); export each on its own, or use --format perfetto to merge ranks");
      if (opt.what == "both") {
        if (opt.output.empty() || opt.output == "-")
          throw std::invalid_argument("--what both writes two files: give -o OUT (makes OUT.events.csv, OUT.samples.csv)");
        std::ofstream ev(opt.output + ".events.csv"), sa(opt.output + ".samples.csv");
        if (!ev || !sa) throw std::runtime_error("cannot write " + opt.output + ".events.csv / .samples.csv");
        c.rows = export_csv_events(*views[0], eo, ev).rows;
        finish(ev, opt.output + ".events.csv");
        c.rows += export_csv_samples(*views[0], eo, sa).rows;
        finish(sa, opt.output + ".samples.csv");
      } else {
        auto& out = open_output(opt.output, file, false);
        c = opt.what == "samples" ? export_csv_samples(*views[0], eo, out) : export_csv_events(*views[0], eo, out);
        finish(out, opt.output);
      }
      if (!opt.quiet) std::fprintf(stderr, "stackscope export: %llu rows\n", static_cast<unsigned long long>(c.rows));
      return 0;
    }
    bool binary = opt.format == "perfetto";
    if (binary && opt.incidents)
      for (const RecordingReader* r : views) {
        // As `analyze` finds them (cli/incident_input.h); a recording the engine cannot read exports without.
        try {
          eo.incidents.push_back(analyze::incidents::find_incidents(read_incident_input(*r).input).incidents);
        } catch (const std::invalid_argument&) {
          eo.incidents.emplace_back();
        }
      }
    if (binary && (opt.output.empty() || opt.output == "-") && ::isatty(STDOUT_FILENO))
      throw std::invalid_argument("perfetto output is binary: give -o FILE.perfetto-trace (or redirect stdout)");
    auto& out = open_output(opt.output, file, binary);
    c = binary ? export_perfetto(views, eo, out) : export_chrome_json(views, eo, out);
    finish(out, opt.output);
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
