"""CUDA calls per step of gpt2_overhead.py's GPT-2 training step (same model and step, from
eval/tracing/gpt2_model.py), counted with torch.profiler: the x coordinate of GPT-2's points in the overhead
figure. Prints a CALLS line (step_rounds.py protocol).

  python3 bench/overhead/gpt2_calls.py --steps 20"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "eval", "tracing"))
import gpt2_model  # noqa: E402
import step_rounds  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gpt2_model.add_model_args(ap)
    step_rounds.add_args(ap, steps=20, warmup=5)
    ap.set_defaults(count_calls=True, profile_steps=5)
    args = ap.parse_args()

    import torch

    device = step_rounds.pick_device(torch, args.device)
    torch.manual_seed(0)
    model, opt = gpt2_model.build(args, device)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    tgt = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    step_rounds.run("gpt2", args, lambda: gpt2_model.train_step(model, opt, idx, tgt), sync,
                    {"device": device.type, "batch": args.batch, "seq": args.seq, "layers": args.layers})


if __name__ == "__main__":
    main()
