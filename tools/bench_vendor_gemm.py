#!/usr/bin/env python3
"""The matrix products of one decode step of the 20b shape through the vendor library (cuBLAS
through torch, the experts through torch._grouped_mm where this torch has it, else one cuBLAS call
per expert), the anchor for our GEMMs' per-kernel profile (bench_gpu.lua --profile-steps).

Per layer: qkv (rows x 2880 by 5120), o (rows x 4096 by 2880), and with a random top-4 routing of
32 experts mlp1 (pairs x 2880 by 5760) and mlp2 (pairs x 2880 by 2880), each layer its own bf16
weights (24 layers, about 40 GB, so nothing stays in L2); then the unembedding once (rows x 2880
by 201088). Prints a table and one JSON line per row count; --record appends them to the results
file as the gptoss benchmarks' --record does (lua/gptoss/results.lua, docs/building.md#benchmarks).
Runs on the GPU machine:
    python3 tools/bench_vendor_gemm.py [--rows 1,64,256,1024,2048] [--reps 5] [--record]
"""
import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys

import torch

HIDDEN, Q_DIM, ATTN, INTER, EXPERTS, TOP, LAYERS, VOCAB = 2880, 5120, 4096, 2880, 32, 4, 24, 201088
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the source tree


def results_path():
    """Where --record appends: $GPTOSS_RESULTS, else the tree's examples/results.jsonl."""
    return os.environ.get("GPTOSS_RESULTS") or os.path.join(ROOT, "examples", "results.jsonl")


def git(*args):
    """git's output in the tree, or None outside a git checkout."""
    done = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def record(lines):
    """Appends lines to the results file with the machine (one GPU: torch's current device), the
    command line, HEAD's commit ("uncommitted": true where tracked files differ) and today (UTC)."""
    head = git("rev-parse", "--short", "HEAD")
    fields = {"machine": "one " + torch.cuda.get_device_name(), "gpu": torch.cuda.get_device_name(),
              "command": " ".join(["python3"] + [shlex.quote(a) for a in sys.argv if a != "--record"]),
              "commit": head or "unknown"}
    if head and git("status", "--porcelain", "--untracked-files=no"):
        fields["uncommitted"] = True
    fields["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    with open(results_path(), "a") as f:
        for line in lines:
            f.write(json.dumps({"bench": line["bench"], **fields, **dict(sorted(line.items()))}, ensure_ascii=False,
                               separators=(",", ":")) + "\n")
    print(f"{len(lines)} line{'' if len(lines) == 1 else 's'} recorded in {results_path()}", file=sys.stderr)


def grouped(x, w, offsets, ends):
    """x [pairs][k] sorted by expert, w [E][n][k]: x[rows of e] @ w[e]^T for each expert e."""
    if hasattr(torch, "_grouped_mm"):
        return torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets)
    out = torch.empty(x.shape[0], w.shape[1], device=x.device, dtype=x.dtype)
    begin = 0
    for e, end in enumerate(ends):
        if end > begin:
            out[begin:end] = x[begin:end] @ w[e].t()
        begin = end
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,64,256,1024,2048")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="append the JSON lines to the results file")
    args = parser.parse_args()
    if args.record:
        open(results_path(), "a").close()  # fail before the run, not after
    dev, bf = torch.device("cuda"), torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(1)

    def weights(*shape):
        return (torch.randn(*shape, device=dev, dtype=bf, generator=gen) * 0.02)

    layers = [dict(qkv=weights(Q_DIM, HIDDEN), o=weights(HIDDEN, ATTN), mlp1=weights(EXPERTS, 2 * INTER, HIDDEN),
                   mlp2=weights(EXPERTS, HIDDEN, INTER)) for _ in range(LAYERS)]
    unembed = weights(VOCAB, HIDDEN)
    kind = "torch._grouped_mm" if hasattr(torch, "_grouped_mm") else "one cuBLAS call per expert"
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, experts: {kind}")
    lines = []
    print(f"{'rows':>6} {'qkv ms':>9} {'o ms':>9} {'mlp1 ms':>9} {'mlp2 ms':>9} {'logits ms':>10} {'step ms':>9} {'TFLOP/s':>8}")
    for rows in [int(r) for r in args.rows.split(",")]:
        x = torch.randn(rows, HIDDEN, device=dev, dtype=bf, generator=gen)
        attn = torch.randn(rows, ATTN, device=dev, dtype=bf, generator=gen)
        # each row's top 4 distinct experts, the pairs sorted by expert as our dispatch does
        picks = torch.rand(rows, EXPERTS, device=dev, generator=gen).topk(TOP, dim=1).indices.flatten()
        order = picks.argsort(stable=True)
        counts = torch.bincount(picks, minlength=EXPERTS)
        offsets = counts.cumsum(0).to(torch.int32)
        ends = offsets.tolist()
        pairs = x.repeat_interleave(TOP, dim=0)[order].contiguous()
        act = torch.randn(rows * TOP, INTER, device=dev, dtype=bf, generator=gen)
        products = {
            "qkv": lambda l: x @ l["qkv"].t(),
            "o": lambda l: attn @ l["o"].t(),
            "mlp1": lambda l: grouped(pairs, l["mlp1"], offsets, ends),
            "mlp2": lambda l: grouped(act, l["mlp2"], offsets, ends),
        }
        ms = {k: 0.0 for k in list(products) + ["logits"]}
        for rep in range(args.reps + 1):  # the first round warms up
            for name, fn in products.items():
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for l in layers:
                    fn(l)
                stop.record()
                torch.cuda.synchronize()
                if rep:
                    ms[name] += start.elapsed_time(stop) / args.reps
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            x @ unembed.t()
            stop.record()
            torch.cuda.synchronize()
            if rep:
                ms["logits"] += start.elapsed_time(stop) / args.reps
        total = sum(ms.values())
        flops = 2 * rows * (LAYERS * (HIDDEN * Q_DIM + ATTN * HIDDEN + TOP * (HIDDEN * 2 * INTER + INTER * HIDDEN))
                            + HIDDEN * VOCAB)
        tflops = flops / (total * 1e-3) / 1e12
        print(f"{rows:>6} {ms['qkv']:>9.3f} {ms['o']:>9.3f} {ms['mlp1']:>9.3f} {ms['mlp2']:>9.3f} "
              f"{ms['logits']:>10.3f} {total:>9.3f} {tflops:>8.1f}")
        lines.append({"bench": "vendor_gemm", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "experts": kind, "rows": rows, "ms": {k: round(v, 4) for k, v in ms.items()},
                      "step_ms": round(total, 4), "tflops": round(tflops, 1)})
        print(json.dumps(lines[-1]))
    if args.record:
        record(lines)


if __name__ == "__main__":
    main()
