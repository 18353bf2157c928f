// Text that another process controls (its name, command line, cgroup path, environment) made fit for logs, JSON,
// Prometheus label values and recordings: any 15 bytes can be a process name, and nlohmann::json throws on invalid
// UTF-8 when it dumps, a log line would pass terminal escapes on.
#pragma once
#include <string>
#include <string_view>

namespace stackscope {

// Valid UTF-8: each invalid sequence becomes U+FFFD, each control character (C0, DEL, C1) `\xNN` (`\u00NN` for
// C1); everything else is kept as it is.
std::string printable_text(std::string_view raw);
// The same with each control character replaced by `mark` (short names: one character for one).
std::string printable_text(std::string_view raw, char mark);

}  // namespace stackscope
