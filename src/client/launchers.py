"""corral launchers: the Slurm commands started without ``site`` (``python -I -S``).

pip's console scripts start a full interpreter: ``site`` reads every ``.pth`` file of the
environment (setuptools' distutils hack, the editable install's finder) and honours the
caller's ``PYTHON*`` variables. A command run thousands of times a minute (sbatch from a
submitter loop, srun in every step, squeue from a dashboard) pays that each call. The
launchers written here name the interpreter with ``-IS`` and put the environment's
package directories on ``sys.path`` themselves, so a call pays only the imports the
command needs; ``-I`` also keeps a user's ``PYTHONPATH`` or ``PYTHONSTARTUP`` out of a
command that may run as root (scontrol, sacctmgr). ``corral`` itself (and the daemons)
keep pip's scripts: they are not on a hot path.

corral launchers [--dir DIR]     write them (default: beside this interpreter, over pip's)
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from corral.errors import CorralError, InvalidOption

PROG = "corral launchers"
_MARK = "# written by `corral launchers`"
_SHEBANG_MAX = 255  # Linux reads at most this much of a "#!" line (BINPRM_BUF_SIZE - 1)


def commands() -> dict[str, str]:
    """Each Slurm command this installation provides: name -> "module:function"."""
    found = {
        ep.name: ep.value
        for ep in metadata.entry_points(group="console_scripts")
        if ep.dist is not None and ep.dist.name == "corral" and ep.name != "corral"
    }
    if not found:
        raise CorralError("corral's console scripts are not installed in this environment")
    return dict(sorted(found.items()))


def package_paths() -> list[str]:
    """What ``site`` adds to ``sys.path`` here (the environment's packages and an
    editable install's source), in its order; the standard library ``-S`` keeps."""
    stdlib = {
        os.path.realpath(p)
        for p in (sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"))
        if p
    }
    out = []
    for entry in sys.path[1:]:  # [0] is this script's directory (or '')
        real = os.path.realpath(entry) if entry else ""
        if not real or real.endswith(".zip") or real in stdlib or "lib-dynload" in real:
            continue
        if real not in out:
            out.append(real)
    # an editable install that maps its packages with an import hook, not a path
    here = str(Path(__file__).resolve().parents[1])
    if here not in out:
        out.append(here)
    return out


def launcher(name: str, target: str, python: str, paths: list[str]) -> str:
    module, _, function = target.partition(":")
    if not module or not function.isidentifier():
        raise CorralError(f"console script {name} names {target!r}, not module:function")
    shebang = f"#!{python} -IS"
    if len(shebang) > _SHEBANG_MAX or any(c.isspace() for c in python):
        raise CorralError(
            f"the interpreter's path {python!r} cannot be a #! line (spaces, or over "
            f"{_SHEBANG_MAX} characters): keep pip's scripts"
        )
    return (
        f"{shebang}\n"
        f"{_MARK}: {name} without site's start-up (see client/launchers.py)\n"
        "import sys\n"
        f"sys.path.extend({paths!r})\n"
        f"from {module} import {function}\n"
        "sys.argv[0] = sys.argv[0].removesuffix('.exe')\n"
        f"sys.exit({function}())\n"
    )


def write(directory: Path, python: str) -> list[Path]:
    paths = package_paths()
    written = []
    for name, target in commands().items():
        path = directory / name
        text = launcher(name, target, python, paths)
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, path)  # atomic: a command running now keeps a whole file
        written.append(path)
    return written


def main_args(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument(
        "--dir",
        default="",
        help="where to write them (default: this interpreter's directory, over pip's scripts)",
    )
    args = p.parse_args(argv)
    # the interpreter as this environment names it (a venv's bin/python, not what it links to)
    python = sys.executable
    directory = Path(args.dir or os.path.dirname(python))
    if not directory.is_dir():
        raise InvalidOption(f"--dir {directory}: no such directory")
    written = write(directory, python)
    print(f"{PROG}: {len(written)} commands in {directory} ({', '.join(p.name for p in written)})")
    return 0
