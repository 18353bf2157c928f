#!/usr/bin/env python3
"""Incident benchmark v2 workload 3: a small-batch inference loop, as a model server runs it: each request's inputs
come from the DataLoader (a local dataset file, plus a payload over TCP), a few samples at a time, through a
bf16 MLP-mixer-style model; results are copied back to the host every request. Launch-bound and copy-heavy, unlike
the two training workloads. CPU: small, fp32.

  python3 eval/incidents/workloads/infer.py --seconds 140 --seed 7 --faults ... --fault-log run.faults.jsonl
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402


class Mixer(nn.Module):
    def __init__(self, tokens, dim, depth):
        super().__init__()
        self.blocks = nn.ModuleList()
        for _ in range(depth):
            self.blocks.append(nn.ModuleDict({
                "n1": nn.LayerNorm(dim), "tok": nn.Sequential(nn.Linear(tokens, tokens * 2), nn.GELU(), nn.Linear(tokens * 2, tokens)),
                "n2": nn.LayerNorm(dim), "ch": nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))}))
        self.head = nn.Linear(dim, 1000)

    def forward(self, x):
        for b in self.blocks:
            x = x + b["tok"](b["n1"](x).transpose(1, 2)).transpose(1, 2)
            x = x + b["ch"](b["n2"](x))
        return self.head(x.mean(1))


def main():
    ap = harness.parser(__doc__)
    ap.add_argument("--batch", type=int, default=0, help="requests per step, default 4 GPU, 2 CPU")
    args = ap.parse_args()
    ctx = harness.Context(args)
    batch = args.batch or (4 if ctx.gpu else 2)
    tokens, dim, depth = (196, 512, 8) if ctx.gpu else (32, 64, 2)
    torch.manual_seed(1234 + ctx.rank)
    model = Mixer(tokens, dim, depth).to(ctx.device).eval()
    loader, stall = harness.make_loader(args, ctx, batch * tokens * dim)

    @torch.no_grad()
    def step(b):
        raw, extra = b
        x = raw.to(ctx.device, non_blocking=True).view(batch, tokens, dim).float() / 255.0
        with torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=ctx.gpu):
            logits = model(x)
        top = logits.float().softmax(-1).topk(5).indices.cpu()  # the reply goes back to the host
        return top.sum() + extra[:1].long().sum()

    harness.run("infer", args, ctx, loader, stall, step)


if __name__ == "__main__":
    main()
