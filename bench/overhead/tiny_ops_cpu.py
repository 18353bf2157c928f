"""The CPU tiny-operator loop: each iteration is a chain of 8x8 matmul, tanh and add (a few hundred
thousand PyTorch operator calls a second), so a probe on every operator costs far more than the operator itself.
A step is one iteration; RESULT lines carry iterations/s (steps_per_s) beside the median iteration time.

  python3 bench/overhead/tiny_ops_cpu.py --count-calls     # CALLS line: operator calls per iteration and per second
  python3 bench/overhead/tiny_ops_cpu.py --rounds 3

Always on the CPU. Protocol: step_rounds.py. Only torch is needed."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_rounds  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chain", type=int, default=40, help="matmul-tanh-add links per iteration")
    ap.add_argument("--size", type=int, default=8, help="square matrix side")
    step_rounds.add_args(ap, steps=1500, warmup=200)
    ap.set_defaults(device="cpu")
    args = ap.parse_args()

    import torch

    torch.manual_seed(0)
    w = torch.randn(args.size, args.size) * 0.3
    b = torch.randn(args.size, args.size) * 0.1
    x0 = torch.randn(args.size, args.size)

    def step():
        x = x0
        for _ in range(args.chain):
            x = torch.tanh(x @ w) + b
        return x

    step_rounds.run("tiny_ops_cpu", args, step, lambda: None,
                    {"device": "cpu", "chain": args.chain, "size": args.size, "threads": torch.get_num_threads()})


if __name__ == "__main__":
    main()
