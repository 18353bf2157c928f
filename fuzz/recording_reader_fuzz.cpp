// libFuzzer over the recording reader: any bytes as a recording file must give a RecordingError (or a
// clean read), never a crash, a hang or an unbounded allocation.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "store/block_codec.h"
#include "store/errors.h"
#include "store/recording_reader.h"
#include "store/recording_schema.h"
#include "store/recording_window_tables.h"

using namespace stackscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Half the inputs go straight to the block decoders (where most parsing lives), half through SQLite.
  if (size > 0 && data[0] & 1) {
    std::span<const uint8_t> body(data + 1, size - 1);
    static const std::string empty;
    codec::StringLookup lookup = [](uint32_t id) -> const std::string& {
      if (id > 16) throw RecordingError("unknown string");
      return empty;
    };
    try {
      codec::decode_events(body, lookup, "fuzz");
    } catch (const RecordingError&) {
    }
    try {
      codec::decode_event_refs(body, 17, "fuzz", [](const codec::EventRef&) {});
    } catch (const RecordingError&) {
    }
    try {
      codec::decode_samples(body, "fuzz", [](SeriesId, std::span<const int64_t>, std::span<const double>) {});
    } catch (const RecordingError&) {
    }
    try {
      codec::decompress(body, schema::kMaxBlockBytes, "fuzz");
    } catch (const RecordingError&) {
    }
    try {
      std::vector<uint8_t> out;
      codec::decompress_into(body, schema::kMaxBlockBytes, "fuzz", out);
    } catch (const RecordingError&) {
    }
    return 0;
  }
  char path[] = "/tmp/stackscope-fuzz-XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) return 0;
  (void)!::write(fd, data, size);
  ::close(fd);
  try {
    RecordingReader r(path);
    r.summary();
    r.findings();
    r.notes();
    r.for_each_event({}, [](const Event&) {});
    r.for_each_sample_run([](const SeriesInfo&, std::span<const int64_t>, std::span<const double>) {});
    WindowTablesOptions o;
    o.window_s = 1e-3;  // many windows from a few bytes are the risk: bounded by the recording's span
    read_window_tables(r, o);
  } catch (const std::exception&) {
  }
  ::unlink(path);
  ::unlink((std::string(path) + "-wal").c_str());
  ::unlink((std::string(path) + "-shm").c_str());
  return 0;
}
