"""A launch-bound training loop: a deep MLP of small residual blocks (LayerNorm, Linear, GELU, Linear) at a small
batch, so each step is a few hundred tiny kernels and the host's launch path, not the GPU, sets the pace (about
20-50 k CUDA calls/s on an H100; --count-calls prints the measured rate). --cuda-graph captures the same step
(forward, backward, SGD) once and replays it: one cudaGraphLaunch a step, the kernels invisible to uprobes.

  python3 bench/overhead/launch_bound.py --count-calls          # CALLS line: CUDA calls/step and calls/s
  python3 bench/overhead/launch_bound.py --rounds 3             # RESULT line per round (median step time)
  python3 bench/overhead/launch_bound.py --cuda-graph --rounds 3

Runs on the CPU where torch sees no GPU (not --cuda-graph). Protocol: step_rounds.py. Only torch is needed."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_rounds  # noqa: E402


def build(torch, args, device):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.ln = nn.LayerNorm(width)
            self.fc1 = nn.Linear(width, width)
            self.fc2 = nn.Linear(width, width)

        def forward(self, x):
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))

    torch.manual_seed(0)
    model = nn.Sequential(*[Block(args.width) for _ in range(args.depth)], nn.Linear(args.width, 1)).to(device)
    # Plain SGD as in PyTorch's whole-network CUDA-graph example, so eager and graph modes run the same step.
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width, device=device)
    y = torch.randn(args.batch, 1, device=device)
    return model, opt, x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depth", type=int, default=16, help="residual blocks (about 17 kernels each a step)")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--cuda-graph", action="store_true", help="capture the step once, replay it every step")
    step_rounds.add_args(ap, steps=200, warmup=30)
    args = ap.parse_args()

    import torch

    device = step_rounds.pick_device(torch, args.device)
    if args.cuda_graph and device.type != "cuda":
        raise SystemExit("--cuda-graph needs a GPU")
    model, opt, x, y = build(torch, args, device)
    loss_fn = torch.nn.MSELoss()

    def eager_step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    step = eager_step
    if args.cuda_graph:
        # PyTorch's documented recipe: warm up on a side stream, then capture with the grads freed.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                eager_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            loss_fn(model(x), y).backward()
            opt.step()
        step = graph.replay

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    name = "launch_bound_graph" if args.cuda_graph else "launch_bound"
    step_rounds.run(name, args, step, sync, {"device": device.type, "depth": args.depth, "width": args.width,
                                            "batch": args.batch})


if __name__ == "__main__":
    main()
