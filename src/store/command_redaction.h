// What a recording keeps of the traced command line (meta "command"): secret-looking values are replaced by
// "***". The rule, documented in `record --help` and docs/FEATURES.md:
//  - a secret-looking NAME contains (any case) token, passw, secret, key, credential, auth or cookie, or has pass,
//    pw, pwd or passphrase as a part between '-', '_' and '.' (--db-pass, DB_PW; not --passes);
//  - an argument NAME=VALUE, -NAME=VALUE or --NAME=VALUE of such a NAME keeps its NAME and loses its VALUE
//    (FOO_TOKEN=x, AWS_SECRET_ACCESS_KEY=x);
//  - an argument -NAME or --NAME of that kind (no '=') hides the argument after it (--pass X);
//  - a header "NAME: VALUE" of such a NAME, as an argument or an option's value, hides VALUE, an authentication
//    scheme kept (-H "Authorization: Bearer ***", "TOKEN: ***"); "Bearer X" and "Basic X" anywhere hide X;
//  - user:password@ in a URL hides the password;
//  - a short option hides its value only for a program known to take a password through it, wherever that
//    program's name appears in the command line: mysql and mariadb tools -pX, sshpass -p, redis-cli -a, mongo
//    tools -p, openssl -k, -K, -pass, -passin and -passout, sqlcmd and bcp -P, curl -u, --user, -U and
//    --proxy-user (user:***). Any other program's -p X or -k X keeps X (a port, a count);
//  - an argument holding a shell command (sh -c '...') is redacted word by word by the same rules.
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
