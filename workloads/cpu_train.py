#!/usr/bin/env python3
"""A small GPT-style language-model training loop on the CPU (Debian's python3-torch), the bundled workload
that `scripts/demo.sh` records. Random weights, synthetic tokens: no download. Runs for --seconds."""
import argparse
import time

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, ctx):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        x = self.tok(idx) + self.pos(torch.arange(t))
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def train_step(model, opt, batch, vocab):
    logits = model(batch[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--steps", type=int, default=0, help="stop after N steps (0: run for --seconds)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    vocab, ctx = 512, 64
    model = TinyGPT(vocab, 128, 2, 4, ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    t0 = time.time()
    step = 0
    while (args.steps and step < args.steps) or (not args.steps and time.time() - t0 < args.seconds):
        batch = torch.randint(0, vocab, (8, ctx + 1))
        loss = train_step(model, opt, batch, vocab)
        step += 1
        if step % 20 == 0:
            print(f"step {step} loss {loss:.3f} {(time.time() - t0) / step * 1000:.1f} ms/step", flush=True)
    print(f"done: {step} steps in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
