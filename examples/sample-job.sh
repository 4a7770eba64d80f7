#!/bin/bash
#SBATCH --job-name=sample
#SBATCH --output=%x-%j.out
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --gres=gpu:2
#SBATCH --time=00:05:00

# A sample batch job: shows what a job sees, runs one step on both nodes, then does a
# little real work.
echo "Job $SLURM_JOB_ID ($SLURM_JOB_NAME) on $SLURMD_NODENAME in partition $SLURM_JOB_PARTITION"
echo "Nodes: $SLURM_JOB_NODELIST  tasks: $SLURM_NTASKS  cpus/task: $SLURM_CPUS_PER_TASK"
echo "GPUs: SLURM_JOB_GPUS=$SLURM_JOB_GPUS CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
echo "Working directory: $(pwd)"
# step 0: one task per node, with what torch.distributed reads
srun -l sh -c 'echo "rank $RANK of $WORLD_SIZE on $SLURMD_NODENAME ($(hostname)), rendezvous $MASTER_ADDR:$MASTER_PORT, GPUs $CUDA_VISIBLE_DEVICES"'
python3 - <<'PY'
import hashlib, time
t = time.perf_counter()
h = b"corral"
for _ in range(200_000):
    h = hashlib.sha256(h).digest()
print(f"200k SHA-256 rounds in {time.perf_counter() - t:.2f}s: {h.hex()[:16]}")
PY
