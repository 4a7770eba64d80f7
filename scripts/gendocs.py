"""Write sbatch's option table and input variables in docs/cli.md from client/jobopts.py
(``make docs``); ``--check`` fails if the page is stale (tests/unit/test_job_options.py
runs it). A flag's row is its ``JobOption`` entry's: names, ``metavar`` and ``doc``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from client.jobopts import JOB_OPTIONS, JobOption  # noqa: E402
from client.options import FLAG, OPTIONAL  # noqa: E402

CLI_MD = ROOT / "docs" / "cli.md"
MARK = "<!-- {} {}: written by `make docs` from src/client/jobopts.py (JOB_OPTIONS) -->"


def names(opt: JobOption) -> str:
    """``-J``, ``--job-name NAME`` as the table shows them."""
    if opt.kind == OPTIONAL:
        long = f"--{opt.long}[={opt.metavar}]" if opt.metavar else f"--{opt.long}"
    elif opt.kind == FLAG or not opt.metavar:
        long = f"--{opt.long}"
    else:
        long = f"--{opt.long} {opt.metavar}"
    return ", ".join(f"`{n}`" for n in (f"-{opt.short}" if opt.short else "", long) if n)


def option_table() -> str:
    rows = [f"| {names(o)} | {o.doc} |" for o in JOB_OPTIONS]
    return "\n".join(["| option | meaning |", "|---|---|", *rows])


def input_variables() -> str:
    pairs = sorted((o.env, o.long) for o in JOB_OPTIONS if o.env)
    listed = ", ".join(f"`{env}` (`--{long}`)" for env, long in pairs)
    return f"Input variables, each standing for the option beside it: {listed}."


def render(page: str) -> str:
    for name, body in (("sbatch-options", option_table()), ("sbatch-env", input_variables())):
        begin, end = MARK.format("BEGIN", name), MARK.format("END", name)
        head, found, rest = page.partition(begin)
        _, found_end, tail = rest.partition(end)
        if not (found and found_end):
            raise SystemExit(f"{CLI_MD}: the markers of {name} are missing")
        page = f"{head}{begin}\n{body}\n{end}{tail}"
    return page


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if docs/cli.md is stale")
    args = parser.parse_args()
    page = CLI_MD.read_text()
    fresh = render(page)
    if args.check:
        if fresh != page:
            print(f"{CLI_MD} is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    CLI_MD.write_text(fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
