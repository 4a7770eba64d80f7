"""One rank per task: an NCCL all-reduce over the environment srun sets (gpu_check.py)."""

import os

import torch
import torch.distributed as dist

keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID"]
keys += ["SLURM_NTASKS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"]
print({k: os.environ.get(k) for k in keys}, flush=True)
dist.init_process_group("nccl")
t = torch.ones(1 << 20, device="cuda") * (dist.get_rank() + 1)
dist.all_reduce(t)
torch.cuda.synchronize()
rank, size, backend = dist.get_rank(), dist.get_world_size(), dist.get_backend()
print("rank", rank, "of", size, "allreduce", t[0].item(), "backend", backend, flush=True)
dist.destroy_process_group()
