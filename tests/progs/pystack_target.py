"""Target of the Python stack sampling tests (tests/pystack_test.cpp): nested calls that end in a function that
spins (busy_loop) and one that blocks (sleepy), driven over stdin/stdout so the test attaches before the work.
Prints "ready", waits for a line, runs ROUNDS rounds, prints "done SLEEP_TOTAL_NS" and exits."""
import sys
import time

SLEEP_S = 0.02


def busy_loop(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def sleepy(times):
    slept = 0
    for _ in range(times):
        t0 = time.perf_counter_ns()
        time.sleep(SLEEP_S)
        slept += time.perf_counter_ns() - t0
    return slept


def middle(rounds):
    slept = 0
    for _ in range(rounds):
        # Called back from C (sorted's key): on 3.12 a C-stack shim frame lies between middle and busy_loop,
        # which the sampler must skip.
        sorted([0.05], key=busy_loop)
        slept += sleepy(5)
    return slept


def outer(rounds):
    return middle(rounds)


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    print("ready", flush=True)
    sys.stdin.readline()
    total = outer(rounds)
    print(f"done {total}", flush=True)
