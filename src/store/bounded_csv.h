// Reading delimited text files that may be hostile: a field or a line is refused as soon as it passes its bound
// (a 200 MB field costs 64 KiB, not gigabytes), and an error quotes at most a short excerpt of the input.
// Used by the CSV readers of `import`, `detect` and `stragglers`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <istream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace stackscope {

// A field holds a number, a time or a name: 64 KiB is far past any of them.
inline constexpr size_t kMaxCsvFieldBytes = size_t{64} << 10;
// A line holds at most this many bytes: a million columns of 64-byte values.
inline constexpr size_t kMaxCsvLineBytes = size_t{64} << 20;
// A table has at most this many columns: each costs memory of its own (a series, a name) wherever it goes.
inline constexpr size_t kMaxCsvColumns = 1'000'000;

// `text` quoted for an error message: at most max_bytes of it (cut before a UTF-8 character that does not fit),
// then "..." and its length ("'12345...' (200000000 bytes)"); control bytes are shown as '?'.
std::string quote_excerpt(std::string_view text, size_t max_bytes = 80);

// Splits a stream into lines of fields. A line ends at '\n' (a '\r' before it is dropped); a quoted field
// (quotes on) may hold the delimiter and "" for a quote, not a line break.
class CsvLineReader {
 public:
  struct Options {
    char delimiter = ',';
    bool quotes = false;         // double-quoted fields
    bool skip_bom = false;       // a UTF-8 byte order mark opening the file is dropped
    size_t max_field_bytes = kMaxCsvFieldBytes;
    size_t max_line_bytes = kMaxCsvLineBytes;
  };
  enum class Result { line, end, field_too_long, line_too_long, unterminated_quote };

  CsvLineReader(std::istream& in, Options options);
  // Reads the next line into `fields`, keeping at most max_fields of them (field_count() counts them all, so a
  // line of a million empty fields costs no memory). On field_too_long and line_too_long the line is left
  // unread: the caller refuses the file.
  Result next(std::vector<std::string>& fields, size_t max_fields = std::numeric_limits<size_t>::max());

  size_t line_no() const { return line_no_; }      // 1-based, of the line last read
  size_t field_count() const { return count_; }    // fields of the line last read, kept or not
  bool blank() const { return blank_; }            // the line holds only white space (no quote)
  // What went wrong, for a Result other than line and end, without the file and line ("field 3 is longer ...").
  std::string problem() const;

 private:
  int get();   // the next byte, or -1 at the end
  int peek();
  bool fill();

  std::istream& in_;
  Options opt_;
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;
  bool eof_ = false;
  size_t line_no_ = 0, count_ = 0;
  bool blank_ = true;
  Result last_ = Result::line;
  std::string long_field_start_;
};

}  // namespace stackscope
