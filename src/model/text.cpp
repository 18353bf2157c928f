#include "model/text.h"

#include <iterator>

#include <fmt/format.h>
#include <utf8.h>

namespace stackscope {
namespace {

std::string printable(std::string_view raw, char mark) {
  std::string valid;
  valid.reserve(raw.size());
  utf8::replace_invalid(raw.begin(), raw.end(), std::back_inserter(valid));
  std::string out;
  out.reserve(valid.size());
  for (size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<unsigned char>(valid[i]);
    // C1 controls (U+0080..U+009F) are two bytes in UTF-8: 0xC2 then 0x80..0x9F.
    const bool c1 = c == 0xC2 && i + 1 < valid.size() && static_cast<unsigned char>(valid[i + 1]) <= 0x9F;
    if (c >= 0x20 && c != 0x7F && !c1) {
      out.push_back(valid[i]);
    } else if (mark) {
      out.push_back(mark);
      i += c1;
    } else if (c1) {
      out += fmt::format("\\u00{:02x}", static_cast<unsigned char>(valid[++i]));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

}  // namespace

std::string printable_text(std::string_view raw) { return printable(raw, 0); }
std::string printable_text(std::string_view raw, char mark) { return printable(raw, mark); }

}  // namespace stackscope
