# The products of wgmma_gemm.cu through torch (cuBLAS), one JSON line each: the vendor figures in docs/decisions.md (Hopper GEMM).
#   python3 vendor_dense.py
import json, torch
shapes = [("qkv", 5120, 2880), ("o", 2880, 4096), ("mlp1", 5760, 2880), ("mlp2", 2880, 2880), ("logits", 201088, 2880)]
for rows in (1024, 2048):
    for name, n, k in shapes:
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(3): y = x @ w.t()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(20): y = x @ w.t()
        e1.record(); torch.cuda.synchronize()
        ms = e0.elapsed_time(e1) / 20
        print(json.dumps({"vendor": "torch/cuBLAS", "shape": name, "rows": rows, "n": n, "k": k, "ms": round(ms, 4),
                          "tflops": round(2 * rows * n * k / ms / 1e9, 1)}))
