// The ClickHouse sink's on-disk spool (src/agent/clickhouse_spool.h), on a real directory: batches come back in
// the order they were appended, across a reopen (an agent restart); an acknowledged batch leaves for good; a torn
// last record (the agent killed mid-write) is cut off and the rest kept; beyond its size limit the oldest batches
// are dropped and counted; batch ids never repeat across sessions. And the [clickhouse] settings.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "agent/agent_config.h"
#include "agent/clickhouse_spool.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using stackscope::agent::ClickHouseSpool;

// One row of about 200 bytes.
std::string payload_of(int i) { return fmt::format("{{\"i\":{},\"pad\":\"{}\"}}\n", i, std::string(180, 'p')); }

size_t spool_files(const std::string& dir) {
  size_t n = 0;
  for (auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".spool";
  return n;
}

TEST(ClickHouseSpool, ReplaysInOrderAcrossAReopenAndForgetsWhatWasAcknowledged) {
  TempDir dir;
  const std::string spool_dir = dir.file("spool");
  std::set<std::string> ids;
  {
    ClickHouseSpool spool(spool_dir, 1 << 20, 4096);  // small files: the batches span several
    for (int i = 1; i <= 50; ++i) EXPECT_EQ(spool.append(i % 2 ? "samples" : "incidents", 1, payload_of(i)), uint64_t(i));
    EXPECT_GT(spool_files(spool_dir), 2u);
    for (int i = 1; i <= 10; ++i) {
      auto b = spool.front();
      ASSERT_TRUE(b);
      EXPECT_EQ(b->seq, uint64_t(i));
      EXPECT_EQ(b->payload, payload_of(i));
      EXPECT_EQ(b->table, i % 2 ? "samples" : "incidents");
      ids.insert(b->batch_id);
      spool.pop_front();
    }
    EXPECT_EQ(spool.pending_batches(), 40u);
    EXPECT_GT(spool.oldest_created_unix_ns(), 0);
  }
  ClickHouseSpool again(spool_dir, 1 << 20, 4096);
  EXPECT_EQ(again.pending_batches(), 40u);
  EXPECT_EQ(again.pending_rows(), 40u);
  EXPECT_EQ(again.append("samples", 1, payload_of(51)), 51u);  // the numbering goes on
  for (int i = 11; i <= 51; ++i) {
    auto b = again.front();
    ASSERT_TRUE(b) << i;
    EXPECT_EQ(b->seq, uint64_t(i));
    EXPECT_EQ(b->payload, payload_of(i));
    EXPECT_TRUE(ids.insert(b->batch_id).second) << "batch id used twice: " << b->batch_id;
    again.pop_front();
  }
  EXPECT_FALSE(again.front());
  EXPECT_EQ(again.bytes(), 0u);
  EXPECT_EQ(spool_files(spool_dir), 0u) << "acknowledged files are deleted";
  EXPECT_EQ(again.dropped_batches(), 0u);
  // Even with its bookkeeping gone (a wiped `acked`), a new session's ids differ from every earlier one.
  fs::remove(spool_dir + "/acked");
  ClickHouseSpool fresh(spool_dir, 1 << 20, 4096);
  fresh.append("samples", 1, payload_of(1));
  EXPECT_TRUE(ids.insert(fresh.front()->batch_id).second);
}

TEST(ClickHouseSpool, ATornLastRecordIsCutOffAndTheRestKept) {
  TempDir dir;
  const std::string spool_dir = dir.file("spool");
  {
    ClickHouseSpool spool(spool_dir, 1 << 20);
    for (int i = 1; i <= 3; ++i) spool.append("samples", 1, payload_of(i));
  }
  std::string last;
  for (auto& e : fs::directory_iterator(spool_dir))
    if (e.path().extension() == ".spool") last = e.path().string();
  ASSERT_FALSE(last.empty());
  const auto whole = fs::file_size(last);
  {
    std::ofstream out(last, std::ios::app | std::ios::binary);
    out << "SPOOL1 4 abc-4 samples 1 100 123 1\n{\"i\":";  // killed in the middle of the fourth
  }
  ClickHouseSpool spool(spool_dir, 1 << 20);
  EXPECT_EQ(spool.pending_batches(), 3u);
  EXPECT_EQ(fs::file_size(last), whole);
  EXPECT_EQ(spool.append("samples", 1, payload_of(4)), 4u);
  for (int i = 1; i <= 4; ++i) {
    auto b = spool.front();
    ASSERT_TRUE(b);
    EXPECT_EQ(b->payload, payload_of(i));
    spool.pop_front();
  }
  // A record whose payload no longer matches its checksum is dropped on read, counted, and the next one served.
  spool.append("samples", 1, payload_of(5));
  spool.append("samples", 1, payload_of(6));
  for (auto& e : fs::directory_iterator(spool_dir))
    if (e.path().extension() == ".spool") {
      std::string text = read_file(e.path().string());
      const auto at = text.find("{\"i\":5,");
      ASSERT_NE(at, std::string::npos);
      text[at + 5] = '9';
      write_file(e.path().string(), text);
    }
  auto b = spool.front();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->payload, payload_of(6));
  EXPECT_EQ(spool.dropped_batches(), 1u);
}

TEST(ClickHouseSpool, BeyondItsLimitTheOldestBatchesAreDroppedAndCounted) {
  TempDir dir;
  ClickHouseSpool spool(dir.file("spool"), 1 << 20);  // 1 MiB, files of 256 KiB
  const std::string big(64 << 10, 'x');
  for (int i = 1; i <= 40; ++i) spool.append("samples", 10, "{\"s\":\"" + big + "\"}\n");  // 2.5 MiB in all
  EXPECT_LE(spool.bytes(), (1u << 20) + (300u << 10));
  EXPECT_GT(spool.dropped_batches(), 0u);
  EXPECT_EQ(spool.dropped_rows(), spool.dropped_batches() * 10);
  EXPECT_EQ(spool.pending_batches() + spool.dropped_batches(), 40u);
  // What is left is the newest, still in order.
  uint64_t expect = spool.dropped_batches() + 1;
  while (auto b = spool.front()) {
    EXPECT_EQ(b->seq, expect++);
    spool.pop_front();
  }
  EXPECT_EQ(expect, 41u);
}

TEST(ClickHouseSpool, AnUnusableDirectoryIsAClearError) {
  TempDir dir;
  write_file(dir.file("file"), "x");
  try {
    ClickHouseSpool spool(dir.file("file"), 1 << 20);
    FAIL() << "opened a spool in a regular file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("file")), std::string::npos) << e.what();
  }
  EXPECT_THROW(ClickHouseSpool(dir.file("spool"), 1 << 20).append("no table!", 1, "{}\n"), std::invalid_argument);
}

TEST(ClickHouseConfig, FileAndFlagsAndBadValues) {
  using stackscope::agent::load_agent_config;
  TempDir dir;
  write_file(dir.file("agent.toml"),
             "[clickhouse]\nurl = \"http://ch1:8123\"\ndatabase = \"fleet\"\nbatch_rows = 500\nbatch_interval = \"2s\"\n"
             "aggregate_interval = \"30s\"\nspool_dir = \"/tmp/sp\"\nspool_max_size = \"64MiB\"\ntimeout = \"3s\"\n");
  auto c = load_agent_config(dir.file("agent.toml"), {{"clickhouse.database", "other"}});
  EXPECT_EQ(c.clickhouse.url, "http://ch1:8123");
  EXPECT_EQ(c.clickhouse.database, "other");  // the flag wins
  EXPECT_EQ(c.clickhouse.batch_rows, 500u);
  EXPECT_EQ(c.clickhouse.batch_interval_ns, 2'000'000'000);
  EXPECT_EQ(c.clickhouse.aggregate_interval_ns, 30'000'000'000);
  EXPECT_EQ(c.clickhouse.spool_dir, "/tmp/sp");
  EXPECT_EQ(c.clickhouse.spool_max_bytes, 64ull << 20);
  EXPECT_DOUBLE_EQ(c.clickhouse.timeout_s, 3.0);
  EXPECT_TRUE(load_agent_config("", {}).clickhouse.url.empty()) << "off by default";
  EXPECT_THROW(load_agent_config("", {{"clickhouse.url", "ch1:8123"}}), std::invalid_argument);
  EXPECT_THROW(load_agent_config("", {{"clickhouse.batch_rows", "0"}}), std::invalid_argument);
  EXPECT_THROW(load_agent_config("", {{"clickhouse.spool_max_size", "10KiB"}}), std::invalid_argument);
  EXPECT_THROW(load_agent_config("", {{"clickhouse.database", ""}}), std::invalid_argument);
}

}  // namespace
