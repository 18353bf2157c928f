#include "store/block_codec.h"

#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "store/errors.h"

namespace stackscope::codec {

namespace {
constexpr uint8_t kEventMagic = 0xE1;
constexpr uint8_t kSampleMagicV1 = 0x51;  // still decoded: every series carries its own timestamps
// v2: series ids as deltas, and a series whose timestamps equal the previous series' (every series a sampler
// reads in one go) stores none; the first timestamp is a delta from the previous series' first. This took the
// procfs sampler's blocks from ~25 to ~12 raw bytes per series per block.
constexpr uint8_t kSampleMagic = 0x52;
enum SeriesFlags : uint8_t { kSameTimes = 1 };
enum ArgType : uint8_t { kArgInt = 0, kArgDouble = 1, kArgString = 2 };
enum ValueMode : uint8_t { kIntegralDelta = 0, kXorBits = 1 };

uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
double double_of(uint64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}
bool integral(double v) { return std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15; }
// A running value plus a decoded delta, wrapping as two's complement: the encoder's differences of valid data
// never wrap, and a corrupt block then gives wrong numbers (caught by the checks that follow) instead of signed
// overflow (undefined behaviour; found by the recording reader's fuzz target under UBSan).
int64_t add_delta(int64_t a, int64_t delta) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(delta));
}

// The fields of an encoded event before its name, alike in Event and EventRef (owning and zero-copy decoding);
// `prev_start` is the previous event's start, which the start is a delta to.
template <typename E>
void read_event_header(ByteReader& r, E& e, int64_t& prev_start) {
  const uint8_t layer = r.u8();
  if (layer >= static_cast<uint8_t>(Layer::kCount)) r.fail("unknown layer " + std::to_string(layer));
  e.layer = static_cast<Layer>(layer);
  e.flags = r.u8();
  e.pid = static_cast<uint32_t>(r.varint());
  e.tid = static_cast<uint32_t>(add_delta(static_cast<int64_t>(e.pid), r.zigzag()));
  e.start_ns = add_delta(prev_start, r.zigzag());
  prev_start = e.start_ns;
  e.duration_ns = r.zigzag();
}
}  // namespace

void ByteWriter::f64(double v) {
  uint64_t b = bits_of(v);
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(b >> (8 * i)));
}

void ByteReader::fail(const std::string& why) const {
  throw RecordingError(what_ + ": " + why + " at byte " + std::to_string(pos_));
}

uint64_t ByteReader::varint_slow() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t b = u8();
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  fail("varint longer than 10 bytes");
}

double ByteReader::f64() {
  if (d_.size() - pos_ < 8 || pos_ > d_.size()) fail("truncated double");
  uint64_t b = 0;
  for (int i = 0; i < 8; ++i) b |= static_cast<uint64_t>(d_[pos_ + i]) << (8 * i);
  pos_ += 8;
  return double_of(b);
}

uint32_t StringInterner::intern(std::string_view s) {
  auto it = ids_.find(s);
  if (it != ids_.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(strings_.size());
  strings_.emplace_back(s);
  ids_.emplace(std::string(s), id);
  return id;
}

std::vector<std::pair<uint32_t, std::string>> StringInterner::take_new() {
  std::vector<std::pair<uint32_t, std::string>> out;
  for (; persisted_ < strings_.size(); ++persisted_)
    out.emplace_back(static_cast<uint32_t>(persisted_), strings_[persisted_]);
  return out;
}

std::vector<uint8_t> encode_events(std::span<const Event> events, StringInterner& strings) {
  ByteWriter w;
  w.u8(kEventMagic);
  w.varint(events.size());
  int64_t prev_start = 0;
  for (const Event& e : events) {
    w.u8(static_cast<uint8_t>(e.layer));
    w.u8(e.flags);
    w.varint(e.pid);
    w.zigzag(static_cast<int64_t>(e.tid) - static_cast<int64_t>(e.pid));
    w.zigzag(e.start_ns - prev_start);
    prev_start = e.start_ns;
    w.zigzag(e.duration_ns);
    w.varint(strings.intern(e.name));
    w.varint(e.args.size());
    for (const EventArg& a : e.args) {
      w.varint(strings.intern(a.key));
      if (auto* i = std::get_if<int64_t>(&a.value)) {
        w.u8(kArgInt);
        w.zigzag(*i);
      } else if (auto* d = std::get_if<double>(&a.value)) {
        w.u8(kArgDouble);
        w.f64(*d);
      } else {
        w.u8(kArgString);
        w.varint(strings.intern(std::get<std::string>(a.value)));
      }
    }
  }
  return std::move(w.bytes());
}

std::vector<Event> decode_events(std::span<const uint8_t> block, const StringLookup& strings,
                                 const std::string& what) {
  ByteReader r(block, what);
  if (r.u8() != kEventMagic) r.fail("not an event block");
  uint64_t n = r.varint();
  // Each event takes at least 8 bytes: a count beyond that is corruption, not a reason to allocate.
  if (n > block.size()) r.fail("event count " + std::to_string(n) + " exceeds block size");
  std::vector<Event> out;
  out.reserve(n);
  int64_t prev_start = 0;
  for (uint64_t i = 0; i < n; ++i) {
    Event e;
    read_event_header(r, e, prev_start);
    e.name = strings(static_cast<uint32_t>(r.varint()));
    uint64_t nargs = r.varint();
    if (nargs > 256) r.fail("argument count " + std::to_string(nargs));
    e.args.reserve(nargs);
    for (uint64_t k = 0; k < nargs; ++k) {
      EventArg a;
      a.key = strings(static_cast<uint32_t>(r.varint()));
      switch (r.u8()) {
        case kArgInt: a.value = r.zigzag(); break;
        case kArgDouble: a.value = r.f64(); break;
        case kArgString: a.value = strings(static_cast<uint32_t>(r.varint())); break;
        default: r.fail("unknown argument type");
      }
      e.args.push_back(std::move(a));
    }
    out.push_back(std::move(e));
  }
  return out;
}

void decode_event_refs(std::span<const uint8_t> block, size_t string_count, const std::string& what,
                       const std::function<void(const EventRef&)>& fn) {
  ByteReader r(block, what);
  if (r.u8() != kEventMagic) r.fail("not an event block");
  const uint64_t n = r.varint();
  if (n > block.size()) r.fail("event count " + std::to_string(n) + " exceeds block size");
  auto string_id = [&](uint64_t id) {
    if (id >= string_count) r.fail("reference to unknown string " + std::to_string(id));
    return static_cast<uint32_t>(id);
  };
  std::vector<ArgRef> args;
  args.reserve(16);
  EventRef e;
  int64_t prev_start = 0;
  for (uint64_t i = 0; i < n; ++i) {
    read_event_header(r, e, prev_start);
    e.name = string_id(r.varint());
    const uint64_t nargs = r.varint();
    if (nargs > 256) r.fail("argument count " + std::to_string(nargs));
    args.resize(nargs);
    for (ArgRef& a : args) {
      a.key = string_id(r.varint());
      switch (r.u8()) {
        case kArgInt: a.kind = ArgKind::integer; a.integer = r.zigzag(); break;
        case kArgDouble: a.kind = ArgKind::real; a.real = r.f64(); break;
        case kArgString: a.kind = ArgKind::string; a.text = string_id(r.varint()); break;
        default: r.fail("unknown argument type");
      }
    }
    e.args = args;
    fn(e);
  }
}

std::vector<uint8_t> encode_samples(std::span<const Sample> samples) {
  // Group by series, keeping arrival order within a series (samplers append in time order).
  std::map<SeriesId, std::vector<const Sample*>> by_series;
  for (const Sample& s : samples) by_series[s.series].push_back(&s);
  ByteWriter w;
  w.u8(kSampleMagic);
  w.varint(by_series.size());
  SeriesId prev_id = 0;
  const std::vector<const Sample*>* prev_list = nullptr;
  int64_t prev_first_t = 0;
  for (auto& [id, list] : by_series) {
    w.varint(id - prev_id);
    prev_id = id;
    w.varint(list.size());
    bool same_times = prev_list && prev_list->size() == list.size() &&
                      std::equal(list.begin(), list.end(), prev_list->begin(),
                                 [](const Sample* a, const Sample* b) { return a->t_ns == b->t_ns; });
    bool all_integral = std::all_of(list.begin(), list.end(), [](const Sample* s) { return integral(s->value); });
    w.u8(static_cast<uint8_t>((same_times ? kSameTimes : 0) | (all_integral ? kIntegralDelta : kXorBits) << 1));
    if (!same_times) {
      w.zigzag(list.front()->t_ns - prev_first_t);
      prev_first_t = list.front()->t_ns;
      int64_t prev_t = list.front()->t_ns, prev_dt = 0;
      for (size_t k = 1; k < list.size(); ++k) {
        int64_t dt = list[k]->t_ns - prev_t;
        w.zigzag(dt - prev_dt);
        prev_dt = dt;
        prev_t = list[k]->t_ns;
      }
    }
    prev_list = &list;
    if (all_integral) {
      int64_t prev = 0;
      for (const Sample* s : list) {
        auto v = static_cast<int64_t>(s->value);
        w.zigzag(v - prev);
        prev = v;
      }
    } else {
      uint64_t prev = 0;
      for (const Sample* s : list) {
        uint64_t b = bits_of(s->value);
        w.varint(b ^ prev);
        prev = b;
      }
    }
  }
  return std::move(w.bytes());
}

namespace {
void decode_values(ByteReader& r, uint8_t mode, uint64_t n, std::vector<double>& v) {
  if (mode == kIntegralDelta) {
    int64_t prev = 0;
    for (uint64_t k = 0; k < n; ++k) {
      prev = add_delta(prev, r.zigzag());
      v[k] = static_cast<double>(prev);
    }
  } else if (mode == kXorBits) {
    uint64_t prev = 0;
    for (uint64_t k = 0; k < n; ++k) {
      prev ^= r.varint();
      v[k] = double_of(prev);
    }
  } else {
    r.fail("unknown value mode " + std::to_string(mode));
  }
}
}  // namespace

void decode_samples(std::span<const uint8_t> block, const std::string& what,
                    const std::function<void(SeriesId, std::span<const int64_t>, std::span<const double>)>& fn) {
  ByteReader r(block, what);
  uint8_t magic = r.u8();
  if (magic != kSampleMagic && magic != kSampleMagicV1) r.fail("not a sample block");
  bool v2 = magic == kSampleMagic;
  uint64_t nseries = r.varint();
  if (nseries > block.size()) r.fail("series count exceeds block size");
  std::vector<int64_t> t;
  std::vector<double> v;
  uint64_t id = 0;
  int64_t prev_first_t = 0;
  bool have_times = false;
  for (uint64_t i = 0; i < nseries; ++i) {
    if (v2) {
      id += r.varint();
      if (id > UINT32_MAX) r.fail("series id beyond 32 bits");
    } else {
      id = r.varint();
    }
    uint64_t n = r.varint();
    if (n > block.size()) r.fail("sample count exceeds block size");
    uint8_t mode;
    if (v2) {
      uint8_t flags = r.u8();
      mode = static_cast<uint8_t>(flags >> 1);
      if (flags & kSameTimes) {
        if (!have_times || t.size() != n) r.fail("series reuses timestamps it cannot have");
      } else {
        t.resize(n);
        if (n > 0) {
          prev_first_t = add_delta(prev_first_t, r.zigzag());
          t[0] = prev_first_t;
          int64_t prev_dt = 0;
          for (uint64_t k = 1; k < n; ++k) {
            prev_dt = add_delta(prev_dt, r.zigzag());
            t[k] = add_delta(t[k - 1], prev_dt);
          }
        }
        have_times = true;
      }
    } else {
      t.resize(n);
      int64_t prev_t = 0, prev_dt = 0;
      for (uint64_t k = 0; k < n; ++k) {
        prev_dt = add_delta(prev_dt, r.zigzag());
        prev_t = add_delta(prev_t, prev_dt);
        t[k] = prev_t;
      }
      mode = r.u8();
    }
    v.resize(n);
    decode_values(r, mode, n, v);
    fn(static_cast<SeriesId>(id), t, v);
  }
}

std::vector<uint8_t> compress(std::span<const uint8_t> raw, int level) {
  std::vector<uint8_t> out(ZSTD_compressBound(raw.size()));
  size_t n = ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), level);
  if (ZSTD_isError(n)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

std::vector<uint8_t> decompress(std::span<const uint8_t> packed, size_t max_size, const std::string& what) {
  unsigned long long size = ZSTD_getFrameContentSize(packed.data(), packed.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN)
    throw RecordingError(what + ": not a compressed block");
  if (size > max_size) throw RecordingError(what + ": block claims " + std::to_string(size) + " bytes, over the limit");
  std::vector<uint8_t> out(size);
  size_t n = ZSTD_decompress(out.data(), out.size(), packed.data(), packed.size());
  if (ZSTD_isError(n) || n != size) throw RecordingError(what + ": corrupt compressed block");
  return out;
}

void decompress_into(std::span<const uint8_t> packed, size_t max_size, const std::string& what,
                     std::vector<uint8_t>& out) {
  const unsigned long long size = ZSTD_getFrameContentSize(packed.data(), packed.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN)
    throw RecordingError(what + ": not a compressed block");
  if (size > max_size) throw RecordingError(what + ": block claims " + std::to_string(size) + " bytes, over the limit");
  struct Context {
    ZSTD_DCtx* ctx = ZSTD_createDCtx();
    ~Context() { ZSTD_freeDCtx(ctx); }
  };
  thread_local Context dctx;
  out.resize(size);
  const size_t n = ZSTD_decompressDCtx(dctx.ctx, out.data(), out.size(), packed.data(), packed.size());
  if (ZSTD_isError(n) || n != size) throw RecordingError(what + ": corrupt compressed block");
}

}  // namespace stackscope::codec
