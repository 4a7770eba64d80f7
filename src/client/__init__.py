"""Slurm-compatible commands and the corral operator command (standard library only)."""
