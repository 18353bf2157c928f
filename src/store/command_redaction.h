// What a recording keeps of the traced command line (meta "command"): secret-looking values are replaced by
// "***" (issue 19: `--token=...` was readable by anyone who could read the recording). The rule, documented in
// `record --help` and docs/FEATURES.md:
//  - an argument NAME=VALUE, -NAME=VALUE or --NAME=VALUE whose NAME contains (any case) token, passw, secret,
//    key, credential, auth or cookie keeps its NAME and loses its VALUE;
//  - an argument -NAME or --NAME of that kind (no '=') hides the argument after it;
//  - user:password@ in a URL hides the password.
// `record --keep-cmdline` stores the command line as given.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace stackscope {

// Whether NAME (an option or variable name) looks like it holds a secret.
bool secret_looking_name(std::string_view name);
// The arguments with secret-looking values replaced by "***".
std::vector<std::string> redact_command_line(const std::vector<std::string>& argv);

}  // namespace stackscope
