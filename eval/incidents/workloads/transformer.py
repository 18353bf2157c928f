#!/usr/bin/env python3
"""Incident benchmark v2 workload 2: small GPT-style training (the GPT-2 decoder of eval/tracing/gpt2_model.py),
token batches read by the DataLoader from a local dataset file, bf16 autocast on the GPU; small on the CPU.

  python3 eval/incidents/workloads/transformer.py --seconds 140 --seed 7 --faults ... --fault-log run.faults.jsonl
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tracing"))
import gpt2_model  # noqa: E402
import harness  # noqa: E402


def main():
    ap = harness.parser(__doc__)
    ap.add_argument("--layers", type=int, default=0, help="default 8 GPU, 2 CPU")
    ap.add_argument("--d-model", type=int, default=0, help="default 768 GPU, 64 CPU")
    ap.add_argument("--seq", type=int, default=0, help="default 512 GPU, 32 CPU")
    ap.add_argument("--batch", type=int, default=0, help="default 16 GPU, 4 CPU")
    ap.add_argument("--vocab", type=int, default=0, help="default 32768 GPU, 512 CPU")
    args = ap.parse_args()
    ctx = harness.Context(args)
    gpu = ctx.gpu
    layers, d, seq = args.layers or (8 if gpu else 2), args.d_model or (768 if gpu else 64), args.seq or (512 if gpu else 32)
    batch, vocab = args.batch or (16 if gpu else 4), args.vocab or (32768 if gpu else 512)
    torch.manual_seed(1234 + ctx.rank)
    model = ctx.wrap(gpt2_model.GPT(vocab, seq, d, layers, max(2, d // 64)).to(ctx.device))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    # One batch is (seq + 1) 16-bit tokens per row: inputs and next-token targets.
    loader, stall = harness.make_loader(args, ctx, batch * (seq + 1) * 2)

    def step(b):
        raw, _extra = b
        tok = raw.view(torch.int16).to(ctx.device, non_blocking=True).view(batch, seq + 1).long() % vocab
        opt.zero_grad(set_to_none=True)
        with torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=gpu):
            loss = model(tok[:, :-1].contiguous(), tok[:, 1:].contiguous())
        loss.backward()
        opt.step()
        return loss

    harness.run("transformer", args, ctx, loader, stall, step)


if __name__ == "__main__":
    main()
