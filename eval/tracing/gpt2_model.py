"""A GPT-2-style decoder (pre-LayerNorm blocks, causal self-attention, tied embeddings) in plain PyTorch, shared by
eval/tracing/gpu_validate.py and bench/overhead/gpt2_overhead.py. No pip packages beyond torch."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def attention(q, k, v, dropout_p):
    """Causal attention; the explicit form where torch has no fused kernel (Debian's torch 1.13 on the CPU)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    t = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return F.dropout(att.softmax(-1), dropout_p) @ v


class Block(nn.Module):
    def __init__(self, d_model, n_head, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_out = nn.Linear(4 * d_model, d_model)
        self.n_head = n_head
        self.dropout = dropout

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        y = attention(q, k, v, self.dropout if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=50257, seq=256, d_model=768, n_layer=12, n_head=12, dropout=0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def add_model_args(ap):
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=50257)


def build(args, device):
    model = GPT(args.vocab, args.seq, args.d_model, args.layers, args.heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    return model, opt


def train_step(model, opt, idx, targets):
    opt.zero_grad(set_to_none=True)
    loss = model(idx, targets)
    loss.backward()
    opt.step()
    return loss
