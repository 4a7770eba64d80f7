"""squeue at depth, with and without the field mask (issue 29): ``squeue`` and
``squeue -h -o "%i %T"`` at 1,000 and 10,000 pending (held) jobs, best of 5 (and the
median), "before" being the same build asking for every field
(``CORRAL_NO_FIELD_MASK=1``, what squeue sent until the mask), "after" the mask of the
columns printed; interleaved so both see the same load. GetJobs' JSON size per job is
read in this process, with and without the default format's mask.

    .venv/bin/python -m bench.squeue_depth                 # 1,000 and 10,000
    .venv/bin/python -m bench.squeue_depth --levels 1000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from bench.common import (
    VENV_BIN,
    PhaseResult,
    Table,
    bench_cluster,
    log,
    ms,
    run_cmd,
    save_result,
    submit_grpc_sync,
)

TRIES = 5
NO_MASK_ENV = "CORRAL_NO_FIELD_MASK"  # client/fieldmasks.py (a literal: runs on older trees)


def default_mask() -> list[str] | None:
    """squeue's default format's mask; None on a tree from before the masks."""
    try:
        from client.fieldmasks import squeue_fields
        from client.squeue import DEFAULT_FORMAT, DEFAULT_SORT, format_keys
    except ImportError:
        return None
    return squeue_fields(format_keys(DEFAULT_FORMAT), DEFAULT_SORT)


def json_bytes(cluster: Any, fields: list[str] | None) -> tuple[int, int]:
    """(bytes of GetJobs' JSON answer, as compact JSON, and the jobs in it)."""
    body: dict[str, Any] = {"fields": fields} if fields else {}
    reply = cluster.client().get_jobs(body)
    return len(json.dumps(reply, separators=(",", ":"))), len(reply.get("jobs", []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--levels", default="1000,10000", help="pending jobs, comma-separated")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    result = PhaseResult("squeue_depth", {"load": os.getloadavg()[0], "levels": levels})
    table = Table(
        "squeue at depth (pending, held jobs)",
        ["pending", "command", "mask", "best", "median", "lines"],
    )
    mask = default_mask()
    with bench_cluster("squeue-depth", nodes=2) as cluster:
        env = cluster.env()
        have = 0
        for level in levels:
            log(f"squeue-depth: filling to {level} held jobs")
            have += len(submit_grpc_sync(cluster, level - have, 64, hold=True).job_ids)
            time.sleep(0.5)  # let the passes the submits woke finish
            for name, argv in (
                ("squeue", ["squeue"]),
                ('squeue -h -o "%i %T"', ["squeue", "-h", "-o", "%i %T"]),
            ):
                runs: dict[str, list[float]] = {"before": [], "after": []}
                lines = 0
                cmd = [str(VENV_BIN / argv[0]), *argv[1:]]
                for i in range(TRIES + 1):  # the first of each: a warm-up
                    for label, extra in (("before", {NO_MASK_ENV: "1"}), ("after", {})):
                        dt, proc = run_cmd(cmd, {**env, **extra}, cluster.work_dir)
                        assert proc.returncode == 0, proc.stderr
                        lines = proc.stdout.count("\n")
                        if i:
                            runs[label].append(dt)
                for label, samples in runs.items():
                    best, median = min(samples), statistics.median(samples)
                    table.add(f"{have:,}", f"`{name}`", label, ms(best), ms(median), lines)
                    result.data[f"{have}_{name}_{label}"] = {"samples_s": samples}
            whole, jobs = json_bytes(cluster, None)
            masked, _ = json_bytes(cluster, mask)
            result.data[f"{have}_json"] = {"whole": whole, "masked": masked, "jobs": jobs}
            table.add(
                f"{have:,}",
                "GetJobs JSON a job",
                f"{whole // max(jobs, 1)} -> {masked // max(jobs, 1)} bytes",
                "",
                "",
                "",
            )
    table.notes.append(
        f"load average {result.config['load']:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end; the default format's mask: {mask}"
    )
    result.tables.append(table)
    print(table.render())
    save_result(result)


if __name__ == "__main__":
    main()
