/* Counter slots shared by netfault.bpf.c and netfault.cpp. */
#pragma once
enum netfault_counter {
  NETFAULT_PASSED = 0,  /* matching TCP segments let through */
  NETFAULT_DROPPED = 1, /* matching TCP segments dropped */
  NETFAULT_COUNTER_COUNT = 2,
};
