"""Replay workload traces through the scheduling core on a virtual clock (corral sim)."""
