// Compact encodings for batches of events and samples, stored as zstd-compressed BLOBs.
// Why blocks and not a row per event: SQLite manages ~1M small rows/s at best, and 700 series at 10 Hz must
// cost only a few KB/s on disk; a delta-encoded, compressed block per flush does both.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/event.h"
#include "model/series.h"

namespace stackscope::codec {

class ByteWriter {
 public:
  void u8(uint8_t v) { buf_.push_back(v); }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      buf_.push_back(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    buf_.push_back(static_cast<uint8_t>(v));
  }
  void zigzag(int64_t v) { varint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void f64(double v);
  std::vector<uint8_t>& bytes() { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

// Bounds-checked reader: every overrun throws RecordingError naming the offset.
class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> data, std::string what) : d_(data), what_(std::move(what)) {}
  uint8_t u8();
  uint64_t varint();
  int64_t zigzag() {
    uint64_t u = varint();
    return static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
  }
  double f64();
  bool done() const { return pos_ >= d_.size(); }
  size_t pos() const { return pos_; }
  [[noreturn]] void fail(const std::string& why) const;

 private:
  std::span<const uint8_t> d_;
  size_t pos_ = 0;
  std::string what_;
};

// Maps strings (event names, argument keys, string values) to ids; the writer persists new entries.
class StringInterner {
 public:
  uint32_t intern(std::string_view s);
  // Entries added since the last call (id, text), in id order.
  std::vector<std::pair<uint32_t, std::string>> take_new();
  size_t size() const { return strings_.size(); }

 private:
  std::vector<std::string> strings_;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, uint32_t, Hash, std::equal_to<>> ids_;
  size_t persisted_ = 0;
};

using StringLookup = std::function<const std::string&(uint32_t id)>;

std::vector<uint8_t> encode_events(std::span<const Event> events, StringInterner& strings);
std::vector<Event> decode_events(std::span<const uint8_t> block, const StringLookup& strings,
                                 const std::string& what);

// Samples are grouped by series inside a block; timestamps delta-of-delta (or none when equal to the previous
// series' timestamps, as for every series a sampler reads in one tick), values as integer deltas when
// every value of the series in the block is integral, else XOR of IEEE bits with the previous value.
std::vector<uint8_t> encode_samples(std::span<const Sample> samples);
// Calls `fn(series, times, values)` once per series in the block.
void decode_samples(std::span<const uint8_t> block, const std::string& what,
                    const std::function<void(SeriesId, std::span<const int64_t>, std::span<const double>)>& fn);

std::vector<uint8_t> compress(std::span<const uint8_t> raw, int level);
// Refuses to inflate beyond `max_size` (a corrupt header must not allocate gigabytes).
std::vector<uint8_t> decompress(std::span<const uint8_t> packed, size_t max_size, const std::string& what);

}  // namespace stackscope::codec
