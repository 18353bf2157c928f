"""Small-batch inference: a GPT-2-small-style decoder (eval/tracing/gpt2_model.py) run forward without grad on
batch 2, 64 tokens, as a serving loop would: each step is a few hundred short kernels, so the launch path sets the
pace as in launch_bound.py, without a backward pass.

  python3 bench/overhead/small_batch_infer.py --count-calls
  python3 bench/overhead/small_batch_infer.py --rounds 2

Runs on the CPU where torch sees no GPU (use a smaller model there: --layers 2 --d-model 128 --heads 4 --vocab 1000).
Protocol: step_rounds.py. Only torch is needed."""
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
    ap.set_defaults(batch=2, seq=64)
    step_rounds.add_args(ap, steps=200, warmup=20)
    args = ap.parse_args()

    import torch

    device = step_rounds.pick_device(torch, args.device)
    torch.manual_seed(0)
    model = gpt2_model.GPT(args.vocab, args.seq, args.d_model, args.layers, args.heads).to(device).eval()
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    pos = torch.arange(args.seq, device=device)

    def step():
        # The model's forward computes a training loss; inference wants the last position's logits.
        with torch.no_grad():
            h = model.tok(idx) + model.pos(pos)
            for blk in model.blocks:
                h = blk(h)
            return model.head(model.ln_f(h[:, -1, :])).argmax(-1)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    step_rounds.run("small_batch_infer", args, step, sync,
                    {"device": device.type, "batch": args.batch, "seq": args.seq, "layers": args.layers,
                     "d_model": args.d_model})


if __name__ == "__main__":
    main()
