#!/bin/bash
# The GPU check (scripts/gpu_check.py) on a GPU node, as root, from the project's root:
#   bash scripts/gpu-check.sh [--gpus auto|nvml|fake]
# It needs python3 with torch (CUDA) and the project's dependencies importable. Where
# they are missing and cannot be fetched, put their wheels (built for that Python) in
# .whl/ at the project's root: they are installed into /tmp/site, and the commands are
# run from shims in /tmp/bin. Logs: $OUT/ (else /tmp/out): log.txt and the daemons' logs.
set -u
export PYTHONUNBUFFERED=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=$(command -v python3)
echo "=== machine"
nvidia-smi -L || true
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
uname -r; stat -fc %T /sys/fs/cgroup; $PY --version
BIN=$(dirname "$PY")
if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$ROOT"/.whl/*.whl || { echo "wheels did not install"; exit 1; }
  export PYTHONPATH=/tmp/site:$ROOT/src
  BIN=/tmp/bin
  mkdir -p $BIN
  for c in sbatch squeue scancel sinfo sacct scontrol srun salloc sreport sstat seff sattach corral; do
    m=$c; [ $c = corral ] && m=corral_cmd
    printf '#!%s\nimport sys\nfrom client.%s import main\nsys.argv[0] = "%s"\nsys.exit(main())\n' \
      "$PY" "$m" "$c" > $BIN/$c
    chmod +x $BIN/$c
  done
elif [ -x "$ROOT/.venv/bin/corral" ]; then
  PY=$ROOT/.venv/bin/python; BIN=$ROOT/.venv/bin
fi
export PATH=$BIN:$PATH
$PY -c "import pynvml; pynvml.nvmlInit(); print('pynvml', pynvml.nvmlSystemGetDriverVersion())" || true
$PY "$ROOT/scripts/gpu_check.py" --bin "$BIN" --keep-logs "$OUT" "$@"
