#include "store/command_redaction.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>

namespace stackscope {

namespace {

constexpr std::string_view kHidden = "***";

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool iequals(std::string_view a, std::string_view b) { return lower(a) == lower(b); }

// A name is letters, digits, '-', '_' and '.': "x=y" inside a script's code is not an option.
bool name_like(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '_' || c == '.';
  });
}

std::string_view base_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
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

// HTTP authentication schemes: the word after one is a credential.
bool auth_scheme(std::string_view word) {
  for (std::string_view s : {"bearer", "basic", "digest", "negotiate"})
    if (iequals(word, s)) return true;
  return false;
}

// "Bearer X" / "Basic X" anywhere in an argument (a header, a JSON string) -> "Bearer ***".
std::string redact_auth_schemes(const std::string& arg) {
  const std::string l = lower(arg);
  std::string out;
  size_t copied = 0;
  for (size_t at = 0; at < l.size(); ++at) {
    size_t value = at;
    if (l.compare(at, 7, "bearer ") == 0) value += 7;
    else if (l.compare(at, 6, "basic ") == 0) value += 6;
    else continue;
    // The scheme is a word of its own: at the start or after a space, quote, ':' or '='.
    if (at > 0 && std::string_view(" \t\"':=").find(arg[at - 1]) == std::string_view::npos) continue;
    while (value < arg.size() && arg[value] == ' ') ++value;
    size_t end = value;
    while (end < arg.size() && std::string_view(" \t\"',;").find(arg[end]) == std::string_view::npos) ++end;
    if (end == value || arg.compare(value, end - value, kHidden) == 0) continue;
    out.append(arg, copied, value - copied).append(kHidden);
    copied = end;
    at = end - 1;
  }
  if (copied == 0) return arg;
  return out.append(arg, copied, std::string::npos);
}

// "Name: value" (an HTTP header, curl -H) whose name looks secret -> "Name: ***", an authentication scheme kept
// ("Authorization: Bearer ***"). nullopt when `text` is no such header.
std::optional<std::string> redact_header(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view name = text.substr(0, colon);
  while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
  if (!name_like(name) || !secret_looking_name(name)) return std::nullopt;
  size_t value = colon + 1;
  while (value < text.size() && text[value] == ' ') ++value;
  if (value == text.size()) return std::nullopt;  // "token:" alone holds nothing
  std::string out(text.substr(0, value));
  const size_t space = text.find(' ', value);
  if (space != std::string_view::npos && auth_scheme(text.substr(value, space - value)))
    out.append(text.substr(value, space + 1 - value));
  return out.append(kHidden);
}

// Programs that take a password through a short option (for any other program, -p or -k may mean anything: a
// port, a count). `next`: options whose value is the next argument or attached (-pX); `attached`: options whose
// value is only ever attached (mysql -p X asks for the password and names database X); `user_colon`: options
// whose value is user:password, the user kept.
struct KnownClient {
  std::array<std::string_view, 4> names;
  std::array<std::string_view, 5> next;
  std::array<std::string_view, 1> attached;
  std::array<std::string_view, 4> user_colon;
};
constexpr std::array<KnownClient, 9> kClients{{
    {{"mysql", "mysqldump", "mysqladmin", "mysqlimport"}, {}, {"-p"}, {}},
    {{"mariadb", "mariadb-dump", "mariadb-admin", "mysqlshow"}, {}, {"-p"}, {}},
    {{"mysqlcheck", "mysqlslap", "mysqlbinlog", "mariadb-import"}, {}, {"-p"}, {}},
    {{"sshpass"}, {"-p"}, {}, {}},
    {{"redis-cli", "valkey-cli"}, {"-a"}, {}, {}},
    {{"mongo", "mongosh", "mongodump", "mongorestore"}, {"-p"}, {}, {}},
    {{"openssl"}, {"-k", "-K", "-pass", "-passin", "-passout"}, {}, {}},
    {{"sqlcmd", "bcp"}, {"-P"}, {}, {}},
    {{"curl"}, {}, {}, {"-u", "--user", "-U", "--proxy-user"}},
}};

bool listed(std::string_view s, const auto& list) {
  return std::find(list.begin(), list.end(), s) != list.end() && !s.empty();
}

const KnownClient* known_client(std::string_view arg) {
  if (arg.empty() || arg.front() == '-') return nullptr;
  const std::string_view name = base_name(arg);
  for (const KnownClient& c : kClients)
    if (listed(name, c.names)) return &c;
  return nullptr;
}

// "user:password" -> "user:***"; a value without a colon is a user name alone (the client asks for the password).
std::string hide_after_colon(std::string_view value) {
  const size_t colon = value.find(':');
  if (colon == std::string_view::npos) return std::string(value);
  return std::string(value.substr(0, colon + 1)).append(kHidden);
}

// The words of a shell command given as one argument (sh -c '...'): each word's text as the shell sees it and
// where it lies. Quotes: '...' literally, "..." with \" and \\; a backslash escapes the next character.
struct Word {
  size_t begin, end;
  std::string value;
  char quote;  // the quote around the whole word, or 0
};
std::optional<std::vector<Word>> shell_words(std::string_view s) {
  std::vector<Word> words;
  size_t i = 0;
  while (i < s.size()) {
    if (std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
      continue;
    }
    Word w{i, i, {}, 0};
    const char first = s[i];
    int groups = 0;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) {
      const char c = s[i];
      if (c == '\'' || c == '"') {
        size_t k = i + 1;
        for (; k < s.size() && s[k] != c; ++k) {
          if (c == '"' && s[k] == '\\' && k + 1 < s.size()) ++k;
          w.value += s[k];
        }
        if (k == s.size()) return std::nullopt;  // unbalanced: not a shell command
        ++groups;
        i = k + 1;
      } else if (c == '\\' && i + 1 < s.size()) {
        w.value += s[i + 1];
        groups += 2;
        i += 2;
      } else {
        w.value += c;
        groups += 2;
        ++i;
      }
    }
    w.end = i;
    if (groups == 1 && (first == '\'' || first == '"')) w.quote = first;
    words.push_back(std::move(w));
  }
  return words;
}

std::vector<std::string> redact(const std::vector<std::string>& argv, int depth);

// A shell command in one argument, redacted word by word; words left as they are keep their quoting.
std::string redact_shell_string(const std::string& arg, int depth) {
  auto words = shell_words(arg);
  if (!words) {  // unbalanced quotes: words between white space, as they are
    words.emplace();
    for (size_t i = arg.find_first_not_of(" \t\n"); i != std::string::npos; i = arg.find_first_not_of(" \t\n", i)) {
      const size_t end = std::min(arg.find_first_of(" \t\n", i), arg.size());
      words->push_back({i, end, arg.substr(i, end - i), 0});
      i = end;
    }
  }
  if (words->size() < 2) return arg;
  std::vector<std::string> values;
  for (const Word& w : *words) values.push_back(w.value);
  const std::vector<std::string> redacted = redact(values, depth + 1);
  std::string out;
  size_t copied = 0;
  for (size_t i = 0; i < words->size(); ++i) {
    const Word& w = (*words)[i];
    if (redacted[i] == w.value) continue;
    out.append(arg, copied, w.begin - copied);
    if (w.quote) out.append(1, w.quote).append(redacted[i]).append(1, w.quote);
    else out.append(redacted[i]);
    copied = w.end;
  }
  return out.append(arg, copied, std::string::npos);
}

std::vector<std::string> redact(const std::vector<std::string>& argv, int depth) {
  std::vector<std::string> out;
  out.reserve(argv.size());
  enum class Hide { none, all, after_colon } hide_next = Hide::none;
  const KnownClient* client = nullptr;
  for (const std::string& arg : argv) {
    if (hide_next != Hide::none) {
      out.push_back(hide_next == Hide::all ? std::string(kHidden) : hide_after_colon(arg));
      hide_next = Hide::none;
      continue;
    }
    if (const KnownClient* c = known_client(arg)) client = c;
    // A known client's password option: -p X, -pX, -u user:pw, --user=user:pw.
    if (client && arg.size() >= 2 && arg.front() == '-') {
      const size_t eq = arg.find('=');
      const std::string_view opt = std::string_view(arg).substr(0, eq);
      if (listed(std::string_view(arg), client->next)) {
        out.push_back(arg);
        hide_next = Hide::all;
        continue;
      }
      if (listed(std::string_view(arg), client->user_colon)) {
        out.push_back(arg);
        hide_next = Hide::after_colon;
        continue;
      }
      if (eq != std::string::npos && listed(opt, client->user_colon)) {
        out.push_back(arg.substr(0, eq + 1) + hide_after_colon(std::string_view(arg).substr(eq + 1)));
        continue;
      }
      if (arg.size() > 2 && arg[1] != '-') {  // -pX: a short option with its value attached
        const std::string_view flag = std::string_view(arg).substr(0, 2);
        if (listed(flag, client->next) || listed(flag, client->attached)) {
          out.push_back(std::string(flag) + std::string(kHidden));
          continue;
        }
        if (listed(flag, client->user_colon)) {
          out.push_back(std::string(flag) + hide_after_colon(std::string_view(arg).substr(2)));
          continue;
        }
      }
    }
    const size_t eq = arg.find('=');
    const std::string_view name = std::string_view(arg).substr(0, eq == std::string::npos ? arg.size() : eq);
    const std::string_view bare = name.substr(std::min(name.find_first_not_of('-'), name.size()));
    if (name_like(bare) && secret_looking_name(bare)) {
      if (eq != std::string::npos) {
        out.push_back(arg.substr(0, eq + 1) + std::string(kHidden));
        continue;
      }
      if (name.size() > bare.size()) hide_next = Hide::all;  // -NAME / --NAME: its value is the next argument
    }
    // A header as the argument or as an option's value: -H "Authorization: Bearer X", --header=Cookie:X.
    if (auto header = redact_header(arg)) {
      out.push_back(std::move(*header));
      continue;
    }
    if (eq != std::string::npos && name_like(bare))
      if (auto header = redact_header(std::string_view(arg).substr(eq + 1))) {
        out.push_back(arg.substr(0, eq + 1) + *header);
        continue;
      }
    std::string kept = arg;
    if (depth < 3 && arg.find_first_of(" \t\n") != std::string::npos) kept = redact_shell_string(arg, depth);
    out.push_back(redact_auth_schemes(redact_url_password(std::move(kept))));
  }
  return out;
}

}  // namespace

bool secret_looking_name(std::string_view name) {
  static constexpr std::array<std::string_view, 7> kWords{"token", "passw", "secret", "key",
                                                          "credential", "auth", "cookie"};
  // Short words only as a whole part of the name (--pass, DB_PW, --db-pwd), not inside one (--passes, --upward).
  static constexpr std::array<std::string_view, 4> kParts{"pass", "pw", "pwd", "passphrase"};
  const std::string n = lower(name);
  if (std::any_of(kWords.begin(), kWords.end(), [&](std::string_view w) { return n.find(w) != std::string::npos; }))
    return true;
  for (size_t start = 0; start <= n.size();) {
    size_t end = n.find_first_of("-_.", start);
    if (end == std::string::npos) end = n.size();
    if (listed(std::string_view(n).substr(start, end - start), kParts)) return true;
    start = end + 1;
  }
  return false;
}

std::vector<std::string> redact_command_line(const std::vector<std::string>& argv) { return redact(argv, 0); }

}  // namespace stackscope
