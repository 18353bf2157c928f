// The sample block encoding (v2: shared timestamps between series, id deltas) and decoding of v1 blocks.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "store/block_codec.h"
#include "store/errors.h"

using namespace stackscope;

namespace {
using Decoded = std::map<SeriesId, std::pair<std::vector<int64_t>, std::vector<double>>>;
Decoded decode(const std::vector<uint8_t>& block) {
  Decoded out;
  codec::decode_samples(block, "test", [&](SeriesId id, std::span<const int64_t> t, std::span<const double> v) {
    out[id] = {{t.begin(), t.end()}, {v.begin(), v.end()}};
  });
  return out;
}
}  // namespace

TEST(SampleCodec, RoundTripsSharedAndOwnTimestamps) {
  std::mt19937_64 rng(7);
  std::vector<Sample> samples;
  Decoded want;
  // Ticks of a sampler: series 3..40 share times; 50 has its own; 60 skips a tick; 70 is non-integral.
  for (int tick = 0; tick < 5; ++tick) {
    int64_t t = 1'000'000'000'000 + tick * 100'000'000 + static_cast<int64_t>(rng() % 50'000);
    for (SeriesId id = 3; id <= 40; ++id) {
      double v = static_cast<double>(id * 1'000'000'000ull + tick * (rng() % 1000));
      samples.push_back({id, t, v});
      want[id].first.push_back(t), want[id].second.push_back(v);
    }
    samples.push_back({50, t + 777, -5.0 * tick});
    want[50].first.push_back(t + 777), want[50].second.push_back(-5.0 * tick);
    if (tick != 2) {
      samples.push_back({60, t, 1.0});
      want[60].first.push_back(t), want[60].second.push_back(1.0);
    }
    samples.push_back({70, t, 0.1 * tick});
    want[70].first.push_back(t), want[70].second.push_back(0.1 * tick);
  }
  samples.push_back({4'000'000'000u, 5, 1e300});
  want[4'000'000'000u] = {{5}, {1e300}};
  auto block = codec::encode_samples(samples);
  EXPECT_EQ(decode(block), want);
  // Shared timestamps cost nothing: 42 series x 5 samples in under 10 bytes per sample.
  EXPECT_LT(block.size(), 42u * 5 * 10);
}

TEST(SampleCodec, DecodesVersionOneBlocks) {
  // v1: magic 0x51, per series: id, n, delta-of-delta times from 0, mode byte, values.
  codec::ByteWriter w;
  w.u8(0x51);
  w.varint(1);
  w.varint(9);
  w.varint(3);
  int64_t ts[] = {100, 200, 310}, prev = 0, prev_dt = 0;
  for (int64_t t : ts) {
    w.zigzag((t - prev) - prev_dt);
    prev_dt = t - prev;
    prev = t;
  }
  w.u8(0);  // integral deltas
  w.zigzag(5), w.zigzag(1), w.zigzag(-2);
  Decoded d = decode(w.bytes());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[9].first, (std::vector<int64_t>{100, 200, 310}));
  EXPECT_EQ(d[9].second, (std::vector<double>{5, 6, 4}));
}

TEST(SampleCodec, CorruptBlocksThrowNamedErrors) {
  std::vector<Sample> s = {{1, 10, 1}, {2, 10, 2}};
  auto block = codec::encode_samples(s);
  for (size_t cut = 0; cut < block.size(); ++cut) {
    std::vector<uint8_t> part(block.begin(), block.begin() + static_cast<long>(cut));
    EXPECT_THROW(decode(part), RecordingError) << cut;
  }
  // A first series claiming the previous series' timestamps.
  codec::ByteWriter w;
  w.u8(0x52);
  w.varint(1);
  w.varint(1);
  w.varint(1);
  w.u8(1);
  w.zigzag(3);
  EXPECT_THROW(decode(w.bytes()), RecordingError);
}
