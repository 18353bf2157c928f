// stackscope nvml : samples the GPUs through NVML alone for a while and says what each query returned.
// A diagnostic (which fields does this GPU and driver support?) and the check against nvidia-smi
// (eval/nvml/check_nvml.sh) without the rest of `record`.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "cli/duration_option.h"
#include "cli/registry.h"
#include "model/clock.h"
#include "sample/nvml_sampler.h"
#include "store/errors.h"
#include "store/output_file.h"
#include "store/recording_reader.h"
#include "store/recording_writer.h"

namespace stackscope::cli {
namespace {

struct NvmlCliOptions {
  std::string output = "nvml.sdb";
  double duration_s = 5;
  int interval_ms = 100;
  std::string library = "libnvidia-ml.so.1";
};

int run_nvml(const NvmlCliOptions& opt) {
  try {
    if (!(opt.duration_s > 0) || opt.interval_ms <= 0)
      throw std::invalid_argument("--duration and --interval-ms must be positive");
    {
      // store/output_file.h: replaced only once written, never through a symlink.
      OutputFile out(opt.output, {.inputs = {}, .mode = 0600, .sqlite = true, .what = "--output"});
      RecordingWriter w(out.write_path());
      w.set_meta("command", "stackscope nvml");
      NvmlSamplerOptions so;
      so.library = opt.library;
      so.interval_ms = opt.interval_ms;
      auto sampler = make_nvml_sampler(so);
      CollectorOptions co;
      co.interval_ms = opt.interval_ms;
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      co.host = host;
      CollectorStatus st = sampler->start(w, co);
      std::fprintf(stderr, "stackscope nvml: %s\n", st.message.c_str());
      if (!st.running) {
        w.close();
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(opt.duration_s));
      sampler->stop();
      w.close();
      out.commit();
    }
    RecordingReader r(opt.output);
    for (auto& n : r.notes()) std::printf("note  %s\n", n.text.c_str());
    std::printf("%-32s %-14s %-17s %6s %16s %16s\n", "series", "device", "unit", "n", "mean", "last");
    for (auto& [id, tv] : r.load_samples()) {
      auto* s = r.series_by_id(id);
      if (!s || tv.second.empty()) continue;
      double sum = 0;
      for (double v : tv.second) sum += v;
      std::printf("%-32s %-14s %-17s %6zu %16.6g %16.6g\n", s->name.c_str(), s->device.c_str(), s->unit.c_str(),
                  tv.second.size(), sum / tv.second.size(), tv.second.back());
    }
    r.for_each_event({{Layer::nvml}}, [](const Event& e) {
      std::printf("event %s xid=%lld gpu=%lld\n", e.name.c_str(), static_cast<long long>(e.arg_int("xid")),
                  static_cast<long long>(e.arg_int("gpu", -1)));
    });
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stackscope nvml: %s\n", e.what());
    return 1;
  }
}

RegisterCommand reg("nvml", 80, [](CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<NvmlCliOptions>();
  auto* cmd = app.add_subcommand("nvml", "Sample the GPUs through NVML only and print what each query gave");
  cmd->add_option("-o,--output", opt->output, "Recording to write (default nvml.sdb)");
  cmd->add_option("--duration", opt->duration_s, "How long to sample: seconds or a duration such as 30s, 2m (default 5)")
      ->transform(duration_seconds());
  cmd->add_option("--interval-ms", opt->interval_ms, "Sampling period (default 100 = 10 Hz)");
  cmd->add_option("--library", opt->library, "NVML library to dlopen (default libnvidia-ml.so.1)");
  cmd->callback([opt, &exit_code] { exit_code = run_nvml(*opt); });
});

}  // namespace
}  // namespace stackscope::cli
