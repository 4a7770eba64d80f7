#!/bin/bash
# A job that survives a node failure: requeued, it resumes from its last checkpoint.
#   sbatch examples/train-checkpoint.sh
#SBATCH --job-name=train-ckpt
#SBATCH --requeue
#SBATCH --signal=B:USR1@60
#SBATCH --time=01:00:00
#SBATCH --output=train-ckpt-%j.out
# (output is appended across runs; SLURM_RESTART_COUNT says which run this is)
echo "run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID on $SLURMD_NODENAME, checkpoints in $CORRAL_CHECKPOINT_DIR"
# exec: the --signal warning (B: to the batch shell) then reaches Python itself
exec python3 "${TRAIN_SCRIPT:-$SLURM_SUBMIT_DIR/examples/train-checkpoint.py}" --steps 100 --step-time 1
