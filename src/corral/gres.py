"""GRES naming shared by noded (what it reports) and ctld (what jobs ask for)."""

from __future__ import annotations

import re

_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro", "rtx"}


def gpu_type_from_model(model: str) -> str:
    """The short GRES type Slurm sites use for a GPU model: 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    for token in re.split(r"[\s\-_]+", model.strip().lower()):
        if token and token not in _VENDOR_WORDS:
            return re.sub(r"[^a-z0-9.]", "", token)
    return "gpu"
