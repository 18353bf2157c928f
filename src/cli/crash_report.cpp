#include "cli/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace stackscope::cli {

namespace {

char g_note[512];
constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

// Only async-signal-safe calls from here on: write(2), no stdio, no allocation.
void put(const char* s) {
  for (size_t n = std::strlen(s); n > 0;) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void put_number(long v) {
  char buf[24];
  char* p = buf + sizeof buf;
  *--p = '\0';
  const bool neg = v < 0;
  unsigned long u = neg ? 0ul - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
  do *--p = static_cast<char>('0' + u % 10); while (u /= 10);
  if (neg) *--p = '-';
  put(p);
}

void on_fatal(int sig) {
  char thread[17] = {};
  ::prctl(PR_GET_NAME, thread, 0, 0, 0);
  put("\nstackscope: fatal signal ");
  put(sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
  put(" in thread ");
  put(thread);
  put(" (tid ");
  put_number(static_cast<long>(::syscall(SYS_gettid)));
  put("). This is a bug in stackscope; please report it with the lines below.\n"
      "stackscope: backtrace (symbolise the +0x offsets with: addr2line -f -C -e <unstripped stackscope> OFFSET):\n");
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  if (g_note[0]) {
    put("stackscope: ");
    put(g_note);
    put("\n");
  }
  // The default action (a core dump where enabled, and the exit status a parent reads as this signal).
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_crash_report() {
  // backtrace() loads the unwinder on first use: not inside a signal handler.
  void* warm[1];
  ::backtrace(warm, 1);
  // An alternate stack, so that a stack overflow is reported too.
  static char alt[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_fatal;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) ::sigaction(s, &sa, nullptr);
}

void set_crash_note(const char* text) {
  size_t i = 0;
  for (; text && text[i] && i < sizeof g_note - 1; ++i) g_note[i] = text[i];
  g_note[i] = '\0';
}

}  // namespace stackscope::cli
