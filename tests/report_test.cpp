// `stackscope report`: the HTML page of a recording, rendered by a real browser (Debian's chromium, headless):
// the page must draw without a single console message (its own inline check logs any plot that did not draw,
// and the browser logs any malformed SVG), carry the sections an operator reads (job, progress, incidents,
// layers, stragglers) and say "No incidents" exactly when `analyze` finds none. Recordings: the synthetic GPU
// job (store/synthetic_recording.h: a slowdown and a data-loader stall planted), a real recording of the
// bundled CPU training workload (root, python3-torch), and four ranks written here with one slow rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>

#include "export/svg_plot.h"
#include "store/recording_writer.h"
#include "store/synthetic_recording.h"
#include "test_util.h"

using namespace stackscope;

namespace {

const std::string kBin = STACKSCOPE_BIN;

bool have_chromium() { return run_command("command -v chromium") == 0; }

struct Rendered {
  std::string dom;       // the DOM after the page's scripts ran
  std::string console;   // every console line the browser logged for the page
  bool screenshot = false;
};

// Loads the page in headless chromium twice: once dumping the DOM (console lines go to stderr), once writing a
// screenshot of `height` pixels to `png`.
Rendered render(const TempDir& dir, const std::string& html, const std::string& png, int height = 5000) {
  Rendered r;
  // The page beside its screenshot in the build folder, for a person to open (docs/REPORT.md shows them).
  if (!png.empty()) std::filesystem::copy_file(html, png.substr(0, png.size() - 4) + ".html",
                                               std::filesystem::copy_options::overwrite_existing);
  const std::string flags = "--headless --disable-gpu --no-sandbox --enable-logging=stderr --v=0 --hide-scrollbars "
                            "--user-data-dir=" + dir.file("chromium-profile") + " ";
  const std::string err = dir.file("chromium.err");
  EXPECT_EQ(run_command("timeout 120 chromium " + flags + "--dump-dom file://" + html + " > " + dir.file("dom.html") +
                        " 2> " + err),
            0);
  r.dom = read_file(dir.file("dom.html"));
  std::istringstream in(read_file(err));
  for (std::string line; std::getline(in, line);)
    if (line.find(":CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos) r.console += line + "\n";
  if (!png.empty()) {
    run_command("timeout 120 chromium " + flags + "--window-size=1100," + std::to_string(height) + " --screenshot=" + png +
                " file://" + html + " 2>/dev/null");
    const std::string bytes = read_file(png);
    r.screenshot = bytes.size() > 10'000 && bytes.compare(1, 3, "PNG") == 0;
  }
  return r;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

nlohmann::json analyze_json(const std::string& rec) {
  std::string out;
  EXPECT_EQ(run_command(kBin + " analyze --no-store " + rec + " --json 2>/dev/null", &out), 0) << out;
  return nlohmann::json::parse(out.substr(out.find('{')));
}

// Ranks of a data-parallel job, one recording each: 120 steps of linear (10 ms) then ncclAllReduce; the rank
// `slow` takes 25 ms in linear from step 40 on, the all-reduce of every rank ends when the slowest arrives.
void write_rank(const std::string& path, int rank, int ranks, int slow) {
  RecordingWriter w(path);
  w.set_meta("host", "node" + std::to_string(rank));
  w.set_meta("rank", std::to_string(rank));
  w.set_meta("command", "python3 train.py");
  const uint32_t pid = 2000 + rank;
  w.set_meta("pid", std::to_string(pid));
  w.set_meta("clock.realtime_offset_ns", "1700000000000000000");
  int64_t t = 1'000'000'000;
  for (int step = 0; step < 120; ++step) {
    const bool slowed = step >= 40;
    const int64_t linear = (rank == slow && slowed) ? 25'000'000 : 10'000'000 + rank * 10'000;
    Event op;
    op.layer = Layer::torch;
    op.pid = op.tid = pid;
    op.name = "aten::linear";
    op.start_ns = t;
    op.duration_ns = linear;
    w.append_event(std::move(op));
    const int64_t step0 = 1'000'000'000 + step * 40'000'000LL;
    const int64_t slowest = step0 + (slowed ? 25'000'000 : 10'000'000 + (ranks - 1) * 10'000);
    Event ar;
    ar.layer = Layer::nccl;
    ar.pid = ar.tid = pid;
    ar.name = "ncclAllReduce";
    ar.flags = kEventHostEnqueue;
    ar.start_ns = t + linear + 10'000;
    ar.duration_ns = slowest + 2'000'000 - ar.start_ns;
    ar.args = {{"rank", int64_t{rank}}, {"nranks", int64_t{ranks}}, {"comm", int64_t{0x1000 + rank}},
               {"count", int64_t{1 << 20}}, {"bytes", int64_t{4 << 20}}};
    w.append_event(std::move(ar));
    t = step0 + 40'000'000LL;
  }
  w.close();
}

}  // namespace

TEST(SvgPlot, TicksAreNiceAndCoverTheRange) {
  const auto unit = svg::nice_ticks(0, 1, 5);
  ASSERT_EQ(unit.size(), 6u);
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(unit[i], 0.2 * i, 1e-12);
  const auto t = svg::nice_ticks(3, 97, 4);
  ASSERT_GE(t.size(), 3u);
  EXPECT_GE(t.front(), 3);
  EXPECT_LE(t.back(), 97);
  EXPECT_NEAR(t[1] - t[0], 20, 1e-9);
  EXPECT_EQ(svg::tick_label(15000), "15k");
  EXPECT_EQ(svg::tick_label(2.5e6), "2.5M");
  EXPECT_EQ(svg::tick_label(0), "0");
  EXPECT_EQ(svg::readable_unit("bytes", 3e9).label, "GiB");
  // A line of many points is thinned but keeps its spike; NaN is a gap, not a zero.
  svg::LinePlot p;
  p.title = "t";
  std::vector<double> x, y;
  for (int i = 0; i < 100'000; ++i) {
    x.push_back(i);
    y.push_back(i == 50'000 ? 1000 : (i % 7 == 0 ? NAN : 1));
  }
  p.lines.push_back({"y", x, y, "", false});
  const std::string s = svg::line_plot(p);
  EXPECT_LT(s.size(), 200'000u);
  EXPECT_NE(s.find(">1000<"), std::string::npos) << "the spike sets the axis";
  EXPECT_EQ(s.find("nan"), std::string::npos);
}

TEST(Report, SyntheticGpuJobWithIncidentsRendersCleanlyInChromium) {
  STACKSCOPE_REQUIRE(have_chromium(), "chromium missing (scripts/install-deps.sh installs it)");
  TempDir dir;
  const std::string rec = dir.file("gpu_job.sdb"), html = dir.file("gpu_job.html");
  SyntheticGpuJobOptions o;
  o.seconds = 120;
  o.launches_per_s = 300;
  o.torch_ops_per_s = 150;
  o.kernel_names = 40;
  o.cpus = 4;
  o.python_sample_hz = 49;
  o.loader_workers = 2;
  write_synthetic_gpu_job(rec, o);
  std::string out;
  ASSERT_EQ(run_command(kBin + " report " + rec + " -o " + html, &out), 0) << out;
  const std::string page = read_file(html);
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg")) << "no resource outside the page";
  EXPECT_EQ(page.find("https://"), std::string::npos);
  const auto j = analyze_json(rec);
  const auto& incidents = j["recordings"][0]["incidents"];
  ASSERT_FALSE(incidents.empty()) << "the planted slowdown and stall are incidents: " << j.dump(1);

  const std::string png = std::string(STACKSCOPE_BUILD_DIR) + "/report_gpu_job.png";
  const Rendered r = render(dir, html, png, 7000);
  EXPECT_EQ(r.console, "") << "the page logged to the console";
  EXPECT_NE(r.dom.find("data-checked=\"ok\""), std::string::npos) << "the page's own check did not pass";
  EXPECT_TRUE(r.screenshot) << png;
  for (const char* id : {"id=\"job\"", "id=\"verdict\"", "id=\"progress\"", "id=\"incidents\"", "id=\"layers\"",
                         "id=\"gpu\""})
    EXPECT_NE(r.dom.find(id), std::string::npos) << id;
  // One section per incident, each with the job's progress and its evidence plotted around it.
  for (size_t i = 1; i <= incidents.size(); ++i)
    EXPECT_NE(r.dom.find("id=\"incident-" + std::to_string(i) + "\""), std::string::npos) << i;
  EXPECT_GE(count(r.dom, "class=\"plot evidence\""), incidents.size());
  EXPECT_EQ(r.dom.find("No incidents"), std::string::npos);
  // The job, the layers and GPU plots, with axis ticks and legends.
  EXPECT_NE(r.dom.find("python3 train.py"), std::string::npos);
  EXPECT_NE(r.dom.find("NVIDIA H100"), std::string::npos);
  EXPECT_NE(r.dom.find("class=\"plot gpu-util\""), std::string::npos);
  EXPECT_NE(r.dom.find("class=\"plot gpu-mem\""), std::string::npos);
  EXPECT_NE(r.dom.find("class=\"plot gpu-power\""), std::string::npos);
  EXPECT_NE(r.dom.find("CUDA kernels launched"), std::string::npos);
  EXPECT_NE(r.dom.find("PyTorch operators"), std::string::npos);
  EXPECT_NE(r.dom.find("Python functions on CPU"), std::string::npos);
  EXPECT_NE(r.dom.find("NCCL calls"), std::string::npos);
  EXPECT_NE(r.dom.find("class=\"plot nccl-bw\""), std::string::npos);
  EXPECT_GT(count(r.dom, "class=\"xtick\""), 20u);
  EXPECT_GT(count(r.dom, "class=\"legend\""), 5u);
  // The incidents are shaded on the progress plot, labelled with their cause.
  const std::string cause = incidents[0]["cause"]["class"];
  EXPECT_NE(r.dom.find("#1 " + cause), std::string::npos);
}

TEST(Report, FourRanksWithASlowRankShowTheStragglerView) {
  STACKSCOPE_REQUIRE(have_chromium(), "chromium missing");
  TempDir dir;
  std::string files;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string rec = dir.file("rank" + std::to_string(rank) + ".sdb");
    write_rank(rec, rank, 4, 2);
    files += rec + " ";
  }
  const std::string html = dir.file("job.html");
  std::string out;
  ASSERT_EQ(run_command(kBin + " report " + files + "-o " + html, &out), 0) << out;
  const Rendered r = render(dir, html, std::string(STACKSCOPE_BUILD_DIR) + "/report_four_ranks.png", 6000);
  EXPECT_EQ(r.console, "");
  EXPECT_NE(r.dom.find("data-checked=\"ok\""), std::string::npos);
  ASSERT_NE(r.dom.find("id=\"stragglers\""), std::string::npos);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string n = std::to_string(rank);
    EXPECT_NE(r.dom.find("id=\"rec-" + n + "\""), std::string::npos);
    EXPECT_NE(r.dom.find("id=\"progress-r" + n + "\""), std::string::npos) << "ids stay unique across recordings";
  }
  EXPECT_EQ(r.dom.find("id=\"progress\""), std::string::npos);
  const std::string strag = r.dom.substr(r.dom.find("id=\"stragglers\""));
  EXPECT_NE(strag.find("Straggler: node2:rank2"), std::string::npos) << strag.substr(0, 2000);
  // Heatmaps with a colour scale each, tick labels, and workers in rank order.
  EXPECT_GE(count(strag, "class=\"colour-scale\""), 2u);
  EXPECT_GT(count(strag, "class=\"xtick\""), 3u);
  const size_t r0 = strag.find(">node0:rank0<"), r1 = strag.find(">node1:rank1<"), r3 = strag.find(">node3:rank3<");
  ASSERT_NE(r0, std::string::npos) << strag.substr(0, 3000);
  EXPECT_LT(r0, r1);
  EXPECT_LT(r1, r3);
}

TEST(Report, RealCpuTrainingRecordingAgreesWithAnalyze) {
  STACKSCOPE_REQUIRE(::geteuid() == 0, "needs root (eBPF layers)");
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import torch'") == 0, "python3-torch missing");
  STACKSCOPE_REQUIRE(have_chromium(), "chromium missing");
  TempDir dir;
  const std::string rec = dir.file("cpu.sdb"), html = dir.file("cpu.html");
  const std::string workload = std::string(STACKSCOPE_SOURCE_DIR) + "/workloads/cpu_train.py";
  std::string out;
  ASSERT_EQ(run_prioritised(dir, kBin + " record -q --layers host,python,kernel -o " + rec + " -- /usr/bin/python3 " +
                                     workload + " --seconds 14\n",
                            &out),
            0)
      << out;
  ASSERT_EQ(run_command(kBin + " report " + rec + " -o " + html, &out), 0) << out;
  const Rendered r = render(dir, html, std::string(STACKSCOPE_BUILD_DIR) + "/report_cpu_job.png");
  EXPECT_EQ(r.console, "");
  EXPECT_NE(r.dom.find("data-checked=\"ok\""), std::string::npos);
  EXPECT_TRUE(r.screenshot);
  const auto j = analyze_json(rec);
  const bool healthy = j["recordings"][0]["healthy"].get<bool>();
  // The verdict the page gives is the one `analyze` gives.
  EXPECT_EQ(r.dom.find("<b>No incidents</b>") != std::string::npos, healthy) << j.dump(1);
  EXPECT_EQ(count(r.dom, "class=\"incident\""), j["recordings"][0]["incidents"].size());
  EXPECT_NE(r.dom.find("cpu_train.py"), std::string::npos);
  EXPECT_NE(r.dom.find("class=\"plot progress\""), std::string::npos);
  EXPECT_NE(r.dom.find("class=\"plot host-cpu\""), std::string::npos);
  EXPECT_NE(r.dom.find("Python functions"), std::string::npos);
  EXPECT_NE(r.dom.find("No GPU series"), std::string::npos);
}

TEST(Report, BadInputIsAClearError) {
  TempDir dir;
  write_file(dir.file("bad.sdb"), "not a recording");
  std::string out;
  EXPECT_NE(run_command(kBin + " report " + dir.file("bad.sdb") + " -o " + dir.file("x.html"), &out), 0);
  EXPECT_NE(out.find("stackscope report:"), std::string::npos) << out;
  EXPECT_NE(run_command(kBin + " report " + dir.file("missing.sdb") + " -o " + dir.file("x.html"), &out), 0);
}
