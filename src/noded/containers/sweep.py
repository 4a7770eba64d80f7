"""After a crash of noded: every container an earlier noded left is unmounted and its
state removed (recovery.py has killed its processes by then: each task of a container
carries its job's markers).

Only noded's own state directory is looked at (root's, under the spool); crun's state
in it is the user's, so crun is never asked, as root, to act on it: the overlay mounts
are found in the kernel's mount table instead (ours only: unmount.py), and the
directories removed without following anything in them.
"""

from __future__ import annotations

import os
import shutil

import structlog

from noded.containers.unmount import container_mounts, unmount_job

log = structlog.get_logger("noded")


def sweep(state_dir: str, keep: set[int] | None = None) -> list[int]:
    """Remove the containers of every job under ``state_dir`` but ``keep``; returns the
    job ids swept."""
    if not os.path.isdir(state_dir):
        return []
    swept = []
    for entry in sorted(os.listdir(state_dir)):
        if not entry.startswith("job_") or not entry[4:].isdigit():
            continue
        job_id = int(entry[4:])
        if keep and job_id in keep:
            continue
        path = os.path.join(state_dir, entry)
        mounts = unmount_job(state_dir, entry)
        left = container_mounts(state_dir, entry)
        if left:  # removing through the image's bind would remove the cached image
            log.error("container leftovers still mounted: kept", job_id=job_id, mounts=left)
            continue
        shutil.rmtree(path, ignore_errors=True)
        swept.append(job_id)
        log.info("container leftovers removed", job_id=job_id, mounts=len(mounts))
    return swept
