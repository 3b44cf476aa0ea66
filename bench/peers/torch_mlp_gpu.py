#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU twin of ../shared/peers/torch_mlp.py: the Keras-example MLP (784-512 relu-10) on Fashion-MNIST with
PyTorch on one CUDA device, for scripts/gpu-check's side-by-side with `tensorpool train --devices cuda:0`.

Same model, initialisation (glorot-uniform weights, zero biases), optimizer (Adam, lr 1e-3, eps 1e-7), loss
and per-epoch shuffle as the CPU peer. The GPU-specific choices are the ones a PyTorch user makes for speed:
- the training set is uploaded to the device once (`--feed resident`, the default) and each batch is an
  index_select there; `--feed host` instead copies each batch from pinned host memory (non_blocking);
- the running loss is summed on the device and read once per epoch (no per-step synchronisation);
- `--cuda-graph` captures one training step in a CUDA graph and replays it (the host out of the loop).
Data directory: --data or $FASHION_MNIST_DIR or the Debian package's; the IDX files may be gzip-compressed or
not. Prints one JSON line: per-epoch time, samples/s, loss, test accuracy, and the device's peak memory.

  python3 torch_mlp_gpu.py --batch 128 --epochs 5 --data /tmp/fashion-mnist
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn


def read_idx(directory, stem):
    path = os.path.join(directory, stem)
    opener = gzip.open if os.path.exists(path + ".gz") else open
    with opener(path + ".gz" if opener is gzip.open else path, "rb") as f:
        buf = f.read()
    magic, = struct.unpack(">I", buf[:4])
    ndim = magic & 0xFF
    if (magic >> 8) != 0x08:
        raise SystemExit(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, buf[4:4 + 4 * ndim])
    return np.frombuffer(buf, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(directory, split):
    pre = "train" if split == "train" else "t10k"
    x = read_idx(directory, f"{pre}-images-idx3-ubyte").reshape(-1, 784)
    y = read_idx(directory, f"{pre}-labels-idx1-ubyte")
    return (torch.from_numpy(x.astype(np.float32) / np.float32(255.0)).contiguous(),
            torch.from_numpy(y.astype(np.int64)).contiguous())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", default="512", help="hidden Dense relu widths, comma-separated")
    ap.add_argument("--data", default=os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--feed", choices=["resident", "host"], default="resident")
    ap.add_argument("--cuda-graph", action="store_true", help="capture the training step in a CUDA graph")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matrix products (off: float32 as on the CPU)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_mlp_gpu.py: PyTorch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.manual_seed(a.seed)
    dev = torch.device("cuda:0")

    t0 = time.perf_counter()
    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "test")
    if a.feed == "resident":
        xtr_src, ytr_src = xtr.to(dev), ytr.to(dev)
    else:
        xtr_src, ytr_src = xtr.pin_memory(), ytr.pin_memory()
    xte, yte = xte.to(dev), yte.to(dev)
    torch.cuda.synchronize()
    t_load = time.perf_counter() - t0

    widths = [784] + [int(w) for w in a.hidden.split(",")]
    layers = []
    for i, o in zip(widths, widths[1:]):
        layers += [nn.Linear(i, o), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(widths[-1], 10)).to(dev)
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    # capturable: the step count stays on the device, so the graph replays it.
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7, capturable=a.cuda_graph)
    lossf = nn.CrossEntropyLoss()

    n = xtr.shape[0]
    B = a.batch
    full = n // B * B  # the graph needs one batch shape; the last partial batch runs eagerly
    xb_static = torch.empty(B, 784, device=dev)
    yb_static = torch.empty(B, dtype=torch.int64, device=dev)

    def step(xb, yb):
        opt.zero_grad(set_to_none=False)
        loss = lossf(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    graph = None
    loss_static = None
    if a.cuda_graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the capture, as PyTorch's docs require
            xb_static.copy_(xtr_src[:B].to(dev, non_blocking=True))
            yb_static.copy_(ytr_src[:B].to(dev, non_blocking=True))
            for _ in range(3):
                step(xb_static, yb_static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            loss_static = step(xb_static, yb_static)
        # Warm-up changed the weights and the moments: start from a fresh initialisation as the eager run does.
        torch.manual_seed(a.seed)
        with torch.no_grad():
            for m in model:
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)
                    nn.init.zeros_(m.bias)
            for state in opt.state.values():
                for key, value in state.items():
                    if torch.is_tensor(value):
                        value.zero_()

    torch.cuda.reset_peak_memory_stats(dev)
    epochs = []
    for ep in range(a.epochs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        perm = torch.randperm(n, device=dev if a.feed == "resident" else "cpu")
        tot = torch.zeros((), device=dev)
        for i in range(0, n, B):
            idx = perm[i:i + B]
            if a.feed == "resident":
                xb, yb = xtr_src.index_select(0, idx), ytr_src.index_select(0, idx)
            else:
                xb = xtr_src.index_select(0, idx).pin_memory().to(dev, non_blocking=True)
                yb = ytr_src.index_select(0, idx).pin_memory().to(dev, non_blocking=True)
            if graph is not None and i < full:
                xb_static.copy_(xb)
                yb_static.copy_(yb)
                graph.replay()
                tot += loss_static.detach() * B
            else:
                tot += step(xb, yb).detach() * xb.shape[0]
        train_loss = (tot / n).item()  # the one synchronisation of the epoch
        dt = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        model.train()
        epochs.append({"epoch": ep + 1, "time_s": dt, "samples_per_s": n / dt, "train_loss": train_loss,
                       "test_acc": acc})

    print(json.dumps({
        "peer": "torch-cuda", "torch": torch.__version__, "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(dev), "batch": B, "feed": a.feed, "cuda_graph": a.cuda_graph,
        "tf32": a.tf32, "n_train": n, "load_s": t_load,
        "peak_device_bytes": torch.cuda.max_memory_allocated(dev),
        "peak_device_reserved_bytes": torch.cuda.max_memory_reserved(dev),
        "epochs": epochs,
    }))


if __name__ == "__main__":
    main()
