// What stackscope says when it dies of a fatal signal (a bug): which thread, where (a backtrace to symbolise with
// addr2line), and where the recording so far is. The recording itself needs nothing from here: it is written
// so that it opens after any death (store/recording_writer.h).
#pragma once

namespace stackscope::cli {

// Once, first thing in main(): handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT on an alternate stack.
void install_crash_report();

// A line the report ends with (the recording's path); copied, at most 511 bytes. "" clears it.
void set_crash_note(const char* text);

}  // namespace stackscope::cli
