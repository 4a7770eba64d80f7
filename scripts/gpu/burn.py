"""A GPU load for scripts/gpu_check.py: bf16 matmuls for N seconds, holding HOLD_GB of
GPU memory; prints what it saw. Needs torch with CUDA."""

import os
import sys
import time

import torch

secs = float(sys.argv[1]) if len(sys.argv) > 1 else 10
print(
    "CUDA_VISIBLE_DEVICES=",
    os.environ.get("CUDA_VISIBLE_DEVICES"),
    "devices",
    torch.cuda.device_count(),
    torch.cuda.get_device_name(0),
    flush=True,
)
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
keep = torch.empty(int(os.environ.get("HOLD_GB", "4")) * 2**30, dtype=torch.uint8, device="cuda")
t0 = time.time()
n = 0
while time.time() - t0 < secs:
    for _ in range(50):
        y = x @ x
    torch.cuda.synchronize()
    n += 50
dt = time.time() - t0
print(f"matmuls {n} in {dt:.1f}s = {n * 2 * 8192**3 / dt / 1e12:.0f} TFLOP/s", flush=True)
