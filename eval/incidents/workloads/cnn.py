#!/usr/bin/env python3
"""Incident benchmark v2 workload 1: a ResNet-style CNN trained on images its DataLoader reads from a local dataset
file (and labels fetched over TCP), bf16 autocast on the GPU; fp32 and small on the CPU (Debian's torch 1.13).

  python3 eval/incidents/workloads/cnn.py --seconds 140 --seed 7 --faults cpu_interference,host_stall \
      --fault-log run.faults.jsonl [--injector SOCK --data-port 10000]       (torchrun for 2 ranks: DDP)
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402


class Residual(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.skip is None else self.skip(x)))


class ResNet(nn.Module):
    def __init__(self, widths, blocks, classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        layers, cin = [], widths[0]
        for i, (w, n) in enumerate(zip(widths, blocks)):
            for j in range(n):
                layers.append(Residual(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(self.body(self.stem(x)), 1).flatten(1))


def main():
    ap = harness.parser(__doc__)
    ap.add_argument("--batch", type=int, default=0, help="default 128 GPU, 16 CPU")
    ap.add_argument("--image", type=int, default=0, help="image side, default 64 GPU, 32 CPU")
    args = ap.parse_args()
    ctx = harness.Context(args)
    batch = args.batch or (128 if ctx.gpu else 16)
    side = args.image or (64 if ctx.gpu else 32)
    widths, blocks = ([64, 128, 256, 512], [2, 2, 2, 2]) if ctx.gpu else ([16, 32, 64], [1, 1, 1])
    torch.manual_seed(1234 + ctx.rank)
    torch.backends.cudnn.benchmark = True
    model = ctx.wrap(ResNet(widths, blocks, 100).to(ctx.device).to(memory_format=torch.channels_last))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader, stall = harness.make_loader(args, ctx, batch * 3 * side * side)
    mean = torch.tensor([0.485, 0.456, 0.406], device=ctx.device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=ctx.device).view(1, 3, 1, 1) * 255

    def step(b):
        raw, extra = b
        x = raw.to(ctx.device, non_blocking=True).view(batch, 3, side, side).float()
        x = ((x - mean) / std).contiguous(memory_format=torch.channels_last)
        y = extra.to(ctx.device, non_blocking=True)[:batch].long() % 100
        opt.zero_grad(set_to_none=True)
        with torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=ctx.gpu):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    harness.run("cnn", args, ctx, loader, stall, step)


if __name__ == "__main__":
    main()
