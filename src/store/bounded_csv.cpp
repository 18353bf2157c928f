#include "store/bounded_csv.h"

#include <algorithm>
#include <cctype>

namespace stackscope {

namespace {

// At most max_bytes of text, cut before a UTF-8 character that does not fit, control bytes as '?'.
std::string excerpt(std::string_view text, size_t max_bytes, bool& cut) {
  cut = text.size() > max_bytes;
  size_t n = std::min(text.size(), max_bytes);
  for (int back = 0; cut && back < 3 && n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80; ++back) --n;
  std::string out(text.substr(0, n));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

}  // namespace

std::string quote_excerpt(std::string_view text, size_t max_bytes) {
  bool cut;
  std::string out = "'" + excerpt(text, max_bytes, cut);
  if (cut) return out + "...' (" + std::to_string(text.size()) + " bytes)";
  return out + "'";
}

CsvLineReader::CsvLineReader(std::istream& in, Options options) : in_(in), opt_(options), buf_(size_t{1} << 16) {}

bool CsvLineReader::fill() {
  if (eof_) return false;
  in_.read(buf_.data(), static_cast<std::streamsize>(buf_.size()));
  len_ = static_cast<size_t>(in_.gcount());
  pos_ = 0;
  if (len_ == 0) eof_ = true;
  return len_ > 0;
}

int CsvLineReader::get() {
  if (pos_ == len_ && !fill()) return -1;
  return static_cast<unsigned char>(buf_[pos_++]);
}

int CsvLineReader::peek() {
  if (pos_ == len_ && !fill()) return -1;
  return static_cast<unsigned char>(buf_[pos_]);
}

CsvLineReader::Result CsvLineReader::next(std::vector<std::string>& fields, size_t max_fields) {
  if (line_no_ == 0 && opt_.skip_bom && fill() && len_ >= 3 && buf_[0] == '\xEF' && buf_[1] == '\xBB' &&
      buf_[2] == '\xBF')
    pos_ = 3;
  count_ = 0;
  blank_ = true;
  int c = get();
  if (c < 0) {
    fields.clear();
    return last_ = Result::end;
  }
  ++line_no_;
  // Fields are kept in place (their buffers reused line after line); those past max_fields only counted.
  size_t kept = 0, line_bytes = 0;
  std::string spare;
  std::string* field = nullptr;
  auto start_field = [&] {
    if (kept < max_fields) {
      if (kept == fields.size()) fields.emplace_back();
      field = &fields[kept];
    } else {
      field = &spare;
    }
    field->clear();
  };
  auto end_field = [&] {
    ++count_;
    if (kept < max_fields) ++kept;
  };
  bool quoted = false;
  start_field();
  for (;; c = get()) {
    if (c < 0 || c == '\n') {
      end_field();
      fields.resize(kept);
      return last_ = quoted ? Result::unterminated_quote : Result::line;
    }
    if (c == '\r') {
      const int n = peek();
      if (n < 0 || n == '\n') continue;
    }
    if (++line_bytes > opt_.max_line_bytes) return last_ = Result::line_too_long;
    const char ch = static_cast<char>(c);
    if (quoted) {
      if (ch != '"') {
        field->push_back(ch);
      } else if (peek() == '"') {
        get();
        field->push_back('"');
      } else {
        quoted = false;
      }
    } else if (opt_.quotes && ch == '"') {
      quoted = true;
      blank_ = false;
    } else if (ch == opt_.delimiter) {
      blank_ = blank_ && std::isspace(c);
      end_field();
      start_field();
      continue;
    } else {
      field->push_back(ch);
      blank_ = blank_ && std::isspace(c);
    }
    if (field->size() > opt_.max_field_bytes) {
      long_field_start_ = field->substr(0, 81);  // one past the excerpt: cut at a whole character
      ++count_;  // the field's number, for problem()
      return last_ = Result::field_too_long;
    }
  }
}

std::string CsvLineReader::problem() const {
  switch (last_) {
    case Result::field_too_long: {
      bool cut;
      return "field " + std::to_string(count_) + " is longer than " + std::to_string(opt_.max_field_bytes) +
             " bytes (it starts '" + excerpt(long_field_start_, 80, cut) +
             "...'): a field holds a number, a time or a name; check the delimiter and the quotes";
    }
    case Result::line_too_long:
      return "the line is longer than " + std::to_string(opt_.max_line_bytes) +
             " bytes: split the table into files of fewer columns";
    case Result::unterminated_quote:
      return "unterminated quote";
    default:
      return {};
  }
}

}  // namespace stackscope
