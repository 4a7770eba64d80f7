"""A small getopt_long-style parser, as Slurm's commands parse their options.

Why not argparse: building an argparse parser with sbatch's ~45 options costs more
than the rest of an sbatch call (users submit thousands of jobs from shell loops).
Semantics follow getopt_long as Slurm uses it: ``-x value``, ``-xvalue``,
``--long value``, ``--long=value``, unambiguous prefixes of long names, ``--`` ends
options, and parsing stops at the first non-option (the script and its arguments).
"""

from __future__ import annotations

from corral.errors import InvalidOption

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

FLAG = "flag"  # no value: True
COUNT = "count"  # no value: counts repeats (-vv)
VALUE = "value"  # a required value
OPTIONAL = "optional"  # --long[=value] only; ``const`` when absent
LIST = "list"  # a comma separated list; repeats add to it (sacct -j 1 -j 2), as Slurm's


def getopt_error(message: str) -> InvalidOption:
    """An error getopt itself reports: Slurm's commands print it as ``sbatch: MESSAGE``,
    without the ``error:`` their own messages carry (client.common.run reads the mark)."""
    exc = InvalidOption(message)
    exc.getopt = True  # type: ignore[attr-defined]
    return exc


class Option:
    __slots__ = ("const", "convert", "dest", "help", "kind", "long", "short")

    def __init__(
        self,
        short: str,
        long: str,
        dest: str,
        kind: str = VALUE,
        *,
        help: str = "",
        const: str = "",
        convert: Callable[[str], Any] | None = None,
    ) -> None:
        self.short = short
        self.long = long
        self.dest = dest
        self.kind = kind
        self.help = help
        self.const = const
        self.convert = convert


class JobOption(Option):
    """One option from end to end. Beside ``Option``'s parsing and ``help``: its row in
    docs/cli.md (``metavar``, and ``doc``, else ``help``), its SBATCH_* input variable
    (``env``), the JobSpec fields it sets (``fields``, proto3 JSON names) and how
    (``put``: from the parsed value, the field's value or a tuple with one per field,
    None leaving one unset; without ``put``, the value itself). Options that set no
    field are sbatch's own (--parsable, --wait, ...)."""

    __slots__ = ("doc", "env", "fields", "metavar", "put")

    def __init__(
        self,
        short: str,
        long: str,
        dest: str,
        kind: str = VALUE,
        *,
        help: str,
        metavar: str = "",
        doc: str = "",
        env: str = "",
        fields: tuple[str, ...] = (),
        put: Callable[[Any], Any] | None = None,
        const: str = "",
        convert: Callable[[str], Any] | None = None,
    ) -> None:
        # Option's fields set here, not by super().__init__: sbatch builds ~50 of these
        # at every start, and the second call with keywords doubled the table's cost
        self.short = short
        self.long = long
        self.dest = dest
        self.kind = kind
        self.help = help
        self.const = const
        self.convert = convert
        self.metavar = metavar
        self.doc = doc or help
        self.env = env
        self.fields = fields
        self.put = put


class OptionParser:
    def __init__(self, prog: str, options: Sequence[Option], usage: str = "") -> None:
        self.prog = prog
        self.options = list(options)
        self.usage = usage
        self._short = {o.short: o for o in self.options if o.short}
        self._long = {o.long: o for o in self.options if o.long}

    def _lookup_long(self, name: str) -> Option:
        if name in self._long:
            return self._long[name]
        matches = [o for n, o in self._long.items() if n.startswith(name)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise getopt_error(
                f"unrecognized option '--{name}'\nTry \"{self.prog} --help\" for more information"
            )
        raise getopt_error(f"option '--{name}' is ambiguous")

    def _store(self, out: dict[str, Any], opt: Option, value: str | None) -> None:
        if opt.kind == FLAG:
            out[opt.dest] = True
        elif opt.kind == COUNT:
            out[opt.dest] = int(out.get(opt.dest, 0)) + 1
        else:
            if value is None:
                value = opt.const
            if opt.convert is not None:
                try:
                    out[opt.dest] = opt.convert(value)
                except (ValueError, InvalidOption) as exc:
                    shown = f"--{opt.long}" if opt.long else f"-{opt.short}"
                    raise InvalidOption(f"Invalid {shown} value {value!r}: {exc}") from None
            elif opt.kind == LIST and out.get(opt.dest):
                out[opt.dest] = f"{out[opt.dest]},{value}"
            else:
                out[opt.dest] = value

    def parse(
        self, argv: Sequence[str], *, stop_at_positional: bool = True, permute: bool = False
    ) -> tuple[dict[str, Any], list[str]]:
        """Options as {dest: value} (only those given) and the remaining arguments.

        ``permute``: as GNU getopt, options and positional words may come in any order
        (``scancel 12 -s USR1``); the positional words are returned in their order."""
        out: dict[str, Any] = {}
        words: list[str] = []
        i = 0
        n = len(argv)
        while i < n:
            arg = argv[i]
            if arg == "--":
                return out, words + list(argv[i + 1 :])
            if arg.startswith("--"):
                name, eq, value = arg[2:].partition("=")
                opt = self._lookup_long(name)
                if opt.kind in (FLAG, COUNT):
                    if eq:
                        raise getopt_error(f"option '--{opt.long}' doesn't allow an argument")
                    self._store(out, opt, None)
                elif eq or opt.kind == OPTIONAL:
                    self._store(out, opt, value if eq else None)
                else:
                    if i + 1 >= n:
                        raise getopt_error(f"option '--{opt.long}' requires an argument")
                    i += 1
                    self._store(out, opt, argv[i])
            elif arg.startswith("-") and len(arg) > 1:
                j = 1
                while j < len(arg):
                    opt = self._short.get(arg[j])  # type: ignore[assignment]
                    if opt is None:
                        raise getopt_error(
                            f"invalid option -- '{arg[j]}'\nTry \"{self.prog} "
                            '--help" for more information'
                        )
                    if opt.kind in (FLAG, COUNT):
                        self._store(out, opt, None)
                        j += 1
                        continue
                    rest = arg[j + 1 :]
                    if rest:
                        self._store(out, opt, rest)
                    elif opt.kind == OPTIONAL:
                        self._store(out, opt, None)
                    else:
                        if i + 1 >= n:
                            raise getopt_error(f"option requires an argument -- '{arg[j]}'")
                        i += 1
                        self._store(out, opt, argv[i])
                    break
            elif permute:
                words.append(arg)
            else:
                if stop_at_positional:
                    return out, list(argv[i:])
                raise InvalidOption(f"unexpected argument {arg!r}")
            i += 1
        return out, words

    def help_text(self) -> str:
        lines = [f"Usage: {self.usage or self.prog + ' [OPTIONS...]'}", ""]
        for o in self.options:
            names = ", ".join(
                x for x in (f"-{o.short}" if o.short else "", f"--{o.long}" if o.long else "") if x
            )
            if o.kind in (VALUE, LIST):
                names += "=VALUE" if o.long else " VALUE"
            elif o.kind == OPTIONAL:
                names += "[=VALUE]"
            lines.append(f"  {names:<32} {o.help}")
        return "\n".join(lines) + "\n"


def version_line() -> str:
    """What ``-V``/``--version`` prints in every Slurm-named command (``scontrol version``
    too): Slurm's ``slurm VERSION`` with ours, and that it is corral."""
    from corral import __version__

    return f"slurm {__version__} (corral)\n"


def answered(parser: OptionParser | str, opts: dict[str, Any]) -> bool:
    """Every command's prologue: --help (or --usage) prints the help (the parser's, or
    this text), --version the version line; True when one was answered (exit 0)."""
    import sys

    if opts.get("help") or opts.get("usage"):
        sys.stdout.write(parser if isinstance(parser, str) else parser.help_text())
        return True
    if opts.get("version"):
        sys.stdout.write(version_line())
        return True
    return False


def parse_command(parser: OptionParser, argv: Sequence[str]) -> dict[str, Any] | None:
    """Options of a query command, or None when --help/--usage/--version was answered.

    Extra positional words are an error, as in Slurm's query commands."""
    opts, rest = parser.parse(argv)
    if answered(parser, opts):
        return None
    if rest:
        raise InvalidOption(f"Unrecognized option: {rest[0]}")
    return opts
