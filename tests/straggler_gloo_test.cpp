// One short real run end to end: 4 ranks of data-parallel training with gloo on CPU, rank 1 slowed inside
// one operator, a PyTorch profiler trace per rank, then `stackscope stragglers` must name rank 1 and a
// compute cause. Skipped where Debian's python3-torch is missing (a failure under CI).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

TEST(StragglerGloo, FourRankRunNamesTheSlowedRankAndComputeClass) {
  STACKSCOPE_REQUIRE(run_command("/usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()'") == 0,
                     "no torch with gloo at /usr/bin/python3");
  TempDir dir;
  std::string out;
  const std::string script = std::string(STACKSCOPE_SOURCE_DIR) + "/eval/stragglers/gloo_train.py";
  ASSERT_EQ(run_command("timeout 120 /usr/bin/python3 " + script + " --ranks 4 --steps 8 --slow-rank 1 --fault compute " +
                            "--delay-ms 60 --width 128 --port 29617 --out " + dir.path(),
                        &out),
            0)
      << out;
  std::string files;
  for (int r = 0; r < 4; ++r) files += " " + dir.file("rank" + std::to_string(r) + ".json");
  ASSERT_EQ(run_command(std::string(STACKSCOPE_BIN) + " stragglers --json" + files, &out), 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["stragglers"][0], "rank1") << out.substr(0, 3000);
  ASSERT_FALSE(j["root_causes"].empty()) << out.substr(0, 3000);
  EXPECT_EQ(j["root_causes"][0]["worker"], "rank1");
  EXPECT_EQ(j["root_causes"][0]["class"], "compute");
}
