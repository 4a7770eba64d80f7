"""Which GPUs each task of a step sees: --gpus-per-task and --gpu-bind.

Shared by srun (early errors), ctld (step layout) and noded (CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

from corral.errors import InvalidOption

TYPE_CHECKING = False  # srun imports this: no protobuf on its start-up path
if TYPE_CHECKING:
    from corral.wire import corral_pb2 as pb


def task_gpus(step_node: pb.StepNode, spec: pb.StepSpec, local_id: int) -> list[int]:
    """The GPUs task ``local_id`` on this node sees (CUDA_VISIBLE_DEVICES)."""
    gpus = list(step_node.gpu_indices)
    bind = spec.gpu_bind
    if bind.startswith("map_gpu:"):
        try:
            mapping = [int(x) for x in bind.removeprefix("map_gpu:").split(",") if x]
        except ValueError:
            return gpus
        return [mapping[local_id % len(mapping)]] if mapping else gpus
    if spec.gpus_per_task and bind != "none":
        per = spec.gpus_per_task
        return gpus[local_id * per : (local_id + 1) * per]
    return gpus


def validate_gpu_bind(text: str) -> None:
    if text in ("", "none", "closest") or text.startswith("map_gpu:"):
        if text.startswith("map_gpu:"):
            items = text.removeprefix("map_gpu:").split(",")
            if not items or not all(i.isdecimal() for i in items):
                raise InvalidOption(f"Invalid --gpu-bind argument: {text}")
        return
    raise InvalidOption(f"Invalid --gpu-bind argument: {text} (none, closest, map_gpu:LIST)")
