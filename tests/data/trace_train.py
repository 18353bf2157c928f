"""Small CPU training loop for the tracer test: waits for a line on stdin (so probes can attach), trains a
two-layer MLP for a few steps, prints 'done'. Needs Debian's /usr/bin/python3 (python3-torch)."""
import sys

import torch


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def main():
    torch.manual_seed(0)
    model = TinyNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 32)
    y = torch.randint(0, 4, (16,))
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
        train_step(model, opt, x, y)
    print("done", flush=True)


if __name__ == "__main__":
    main()
