#include "store/command_redaction.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace stackscope {

namespace {

constexpr std::string_view kHidden = "***";

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// scheme://user:password@host -> scheme://user:***@host
std::string redact_url_password(std::string arg) {
  for (size_t scheme = arg.find("://"); scheme != std::string::npos; scheme = arg.find("://", scheme + 3)) {
    const size_t start = scheme + 3;
    const size_t end = arg.find_first_of("/?# ", start);
    const size_t at = arg.rfind('@', end == std::string::npos ? arg.size() : end);
    if (at == std::string::npos || at < start) continue;
    const size_t colon = arg.find(':', start);
    if (colon == std::string::npos || colon > at) continue;
    arg.replace(colon + 1, at - colon - 1, kHidden);
  }
  return arg;
}

}  // namespace

bool secret_looking_name(std::string_view name) {
  static constexpr std::array<std::string_view, 7> kWords{"token", "passw", "secret", "key",
                                                          "credential", "auth", "cookie"};
  const std::string n = lower(name);
  return std::any_of(kWords.begin(), kWords.end(), [&](std::string_view w) { return n.find(w) != std::string::npos; });
}

std::vector<std::string> redact_command_line(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  out.reserve(argv.size());
  bool hide_next = false;
  for (const std::string& arg : argv) {
    if (hide_next) {
      out.emplace_back(kHidden);
      hide_next = false;
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string_view name =
        std::string_view(arg).substr(0, eq == std::string::npos ? arg.size() : eq);
    const std::string_view bare = name.substr(std::min(name.find_first_not_of('-'), name.size()));
    // A name is letters, digits, '-', '_' and '.': "x=y" inside a script's code is not an option.
    const bool name_like = !bare.empty() && std::all_of(bare.begin(), bare.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '-' || c == '_' || c == '.';
    });
    if (name_like && secret_looking_name(bare)) {
      if (eq != std::string::npos) {
        out.push_back(arg.substr(0, eq + 1) + std::string(kHidden));
        continue;
      }
      if (name.size() > bare.size()) hide_next = true;  // -NAME / --NAME: its value is the next argument
    }
    out.push_back(redact_url_password(arg));
  }
  return out;
}

}  // namespace stackscope
