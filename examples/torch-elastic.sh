#!/bin/bash
# Elastic data-parallel torch training: 2 to 3 nodes, one rank each; a node lost (or
# drained) requeues it at once on the nodes left, resuming from its checkpoint at the
# new world size; with controller.elastic_grow it grows back when nodes free up.
#   sbatch examples/torch-elastic.sh        (TORCH_PYTHON: a python with torch)
#SBATCH --job-name=torch-elastic
#SBATCH --nodes=2-3
#SBATCH --elastic
#SBATCH --requeue
#SBATCH --output=torch-elastic-%j.out
echo "run ${SLURM_RESTART_COUNT:-0}: $SLURM_NNODES node(s) ($SLURM_JOB_NODELIST)," \
     "before: ${SLURM_JOB_PREVIOUS_NUM_NODES:-none}; checkpoints in $CORRAL_CHECKPOINT_DIR"
# srun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for env:// init;
# the warning (SIGUSR1) reaches every rank: they save together and exit
srun "${TORCH_PYTHON:-python3}" "${TORCH_SCRIPT:-$SLURM_SUBMIT_DIR/examples/torch-elastic.py}" \
     --steps "${STEPS:-60}"
