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
  // Inline: these run once per byte of every block, tens of millions of times per pass.
  uint8_t u8() {
    if (pos_ >= d_.size()) fail("truncated");
    return d_[pos_++];
  }
  uint64_t varint() {
    if (d_.size() - pos_ >= 10) {  // the common case: no bounds check per byte
      uint64_t v = 0;
      for (int shift = 0; shift < 64; shift += 7) {
        const uint8_t b = d_[pos_++];
        v |= static_cast<uint64_t>(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
      }
      fail("varint longer than 10 bytes");
    }
    return varint_slow();
  }
  int64_t zigzag() {
    uint64_t u = varint();
    return static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
  }
  double f64();
  bool done() const { return pos_ >= d_.size(); }
  size_t pos() const { return pos_; }
  [[noreturn]] void fail(const std::string& why) const;

 private:
  uint64_t varint_slow();
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

// An event as stored in a block: its name, argument keys and string values are ids into the recording's string
// table. Decoding into these costs no allocation per event, for passes over tens of millions of events.
enum class ArgKind : uint8_t { integer = 0, real = 1, string = 2 };
struct ArgRef {
  uint32_t key = 0;
  ArgKind kind = ArgKind::integer;
  uint32_t text = 0;  // kind == string: the value's string id
  int64_t integer = 0;
  double real = 0;
};
struct EventRef {
  Layer layer = Layer::host;
  uint8_t flags = 0;
  uint32_t pid = 0, tid = 0;
  int64_t start_ns = 0, duration_ns = 0;
  uint32_t name = 0;
  std::span<const ArgRef> args;  // valid during the callback only
  // The first argument whose key has id `key`, or nullptr.
  const ArgRef* arg(uint32_t key) const {
    for (const ArgRef& a : args)
      if (a.key == key) return &a;
    return nullptr;
  }
};
// Calls fn once per event of the block, in stored order; every string id is checked against `string_count`.
void decode_event_refs(std::span<const uint8_t> block, size_t string_count, const std::string& what,
                       const std::function<void(const EventRef&)>& fn);
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
// The same into `out`, reusing its memory and this thread's decompression context (one pass reads ~1000 blocks).
void decompress_into(std::span<const uint8_t> packed, size_t max_size, const std::string& what,
                     std::vector<uint8_t>& out);

}  // namespace stackscope::codec
