"""sacct's fields: Slurm's table of names, default widths and kinds (and corral's own
after them), ``-o`` lists parsed against it, and the fixed-width or parsable lines
sacct, sreport and sstat print. Pure functions of their arguments."""

from __future__ import annotations

from corral.errors import InvalidOption

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

STR, NUM, DATE, SECS = "s", "n", "d", "t"  # how a field prints (see AcctField.cell)

# Every sacct field, in Slurm's table order (a prefix names the first field it starts),
# with Slurm's default width (negative: left-justified) and kind.
_ACCT_TABLE = """
Account 10 s|AdminComment 15 s|AllocCPUS 10 n|AllocNodes 10 s|AllocTRES 10 s|AssocID 7 n|
AveCPU 10 s|AveCPUFreq 10 s|AveDiskRead 14 s|AveDiskWrite 14 s|AvePages 10 s|AveRSS 10 s|
AveVMSize 10 s|BlockID 16 s|Cluster 10 s|Comment 14 s|Constraints 19 s|ConsumedEnergy 14 s|
ConsumedEnergyRaw 17 n|Container 19 s|CPUTime 10 t|CPUTimeRAW 10 n|DBIndex -10 n|
DerivedExitCode 15 s|Elapsed 10 t|ElapsedRaw 10 n|Eligible 19 d|End 19 d|ExitCode 8 s|
Flags 19 s|GID 6 n|Group 9 s|JobID -12 s|JobIDRaw -12 s|JobName 10 s|Layout 9 s|
MaxDiskRead 12 s|MaxDiskReadNode 15 s|MaxDiskReadTask 15 n|MaxDiskWrite 12 s|
MaxDiskWriteNode 16 s|MaxDiskWriteTask 16 n|MaxPages 8 s|MaxPagesNode 12 s|MaxPagesTask 14 n|
MaxRSS 10 s|MaxRSSNode 10 s|MaxRSSTask 10 n|MaxVMSize 10 s|MaxVMSizeNode 14 s|
MaxVMSizeTask 14 n|McsLabel 12 s|MinCPU 10 s|MinCPUNode 10 s|MinCPUTask 10 n|NCPUS 10 n|
NNodes 8 n|NodeList 15 s|NTasks 8 n|Partition 10 s|Priority 10 n|QOS 10 s|QOSRAW 6 n|
Reason 22 s|ReqCPUFreq 10 s|ReqCPUFreqGov 13 s|ReqCPUFreqMax 13 s|ReqCPUFreqMin 13 s|
ReqCPUS 8 n|ReqMem 10 s|ReqNodes 8 s|ReqTRES 10 s|Reservation 20 s|ReservationId 8 n|
Reserved 10 t|ResvCPU 10 t|ResvCPURAW 10 n|Start 19 d|State 10 s|Submit 19 d|SubmitLine 20 s|
Suspended 10 t|SystemComment 15 s|SystemCPU 10 s|Timelimit 10 s|TimelimitRaw 10 s|
TotalCPU 10 s|TRESUsageInAve 14 s|TRESUsageInMax 14 s|TRESUsageInMaxNode 18 s|
TRESUsageInMaxTask 18 s|TRESUsageInMin 14 s|TRESUsageInMinNode 18 s|TRESUsageInMinTask 18 s|
TRESUsageInTot 14 s|TRESUsageOutAve 15 s|TRESUsageOutMax 15 s|TRESUsageOutMaxNode 19 s|
TRESUsageOutMaxTask 19 s|TRESUsageOutMin 15 s|TRESUsageOutMinNode 19 s|
TRESUsageOutMinTask 19 s|TRESUsageOutTot 15 s|UID 6 n|User 9 s|UserCPU 10 s|WCKey 10 s|
WCKeyID 10 n|WorkDir 20 s
"""
SLURM_ACCT_FIELDS: tuple[tuple[str, int, str], ...] = tuple(
    (name, int(width), kind)
    for name, width, kind in (
        entry.split() for entry in _ACCT_TABLE.replace("\n", "").split("|") if entry
    )
)
# corral's own, after Slurm's so a prefix still means what it means to Slurm; -e lists
# Slurm's only. The ETTR ones (client/ettr_fields.py): how many interruptions, each
# cause with its count, restart overhead and lost work (their sums), useful / wall
ETTR_FIELDS: tuple[tuple[str, int, str], ...] = (
    ("Interruptions", 13, "n"),
    ("InterruptCauses", 20, "s"),
    ("RestartOverhead", 15, "t"),
    ("LostTime", 10, "t"),
    ("ETTR", 7, "s"),
)
ACCT_FIELDS = (*SLURM_ACCT_FIELDS, ("Restarts", 8, "n"), *ETTR_FIELDS)


class AcctField:
    """One sacct output column: its name, width (negative: left-justified) and kind."""

    __slots__ = ("kind", "name", "width")

    def __init__(self, name: str, width: int, kind: str) -> None:
        self.name = name
        self.width = width
        self.kind = kind

    def __repr__(self) -> str:
        return f"AcctField({self.name!r}, {self.width}, {self.kind!r})"

    def header(self) -> str:
        return _fixed(self.name[: abs(self.width)], self.width)

    def cell(self, value: str) -> str:
        """The value in its column, as sacct prints it: text that does not fit is cut
        and marked ``+``, dates are cut, numbers and durations are never cut."""
        size = abs(self.width)
        if self.kind == STR and len(value) > size:
            value = value[: size - 1] + "+" if size else ""
        elif self.kind == DATE:
            value = value[:size]
        return _fixed(value, self.width)


def _fixed(value: str, width: int) -> str:
    return value.rjust(width) if width >= 0 else value.ljust(-width)


def parse_acct_fields(spec: str) -> list[AcctField]:
    """``JobID,jobname%30,State`` as fields: names case-insensitive and matched as
    prefixes in Slurm's table order, ``ALL`` for every field, ``%N`` a width."""
    fields: list[AcctField] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        name, pct, width_text = item.partition("%")
        width = _atoi(width_text) if pct else None
        lowered = name.lower()
        if lowered == "all"[: len(lowered)] and lowered:
            fields.extend(AcctField(n, w if width is None else width, k) for n, w, k in ACCT_FIELDS)
            continue
        found = next((f for f in ACCT_FIELDS if f[0].lower().startswith(lowered)), None)
        if found is None or not lowered:
            raise InvalidOption(f'Invalid field requested: "{name}"')
        fields.append(AcctField(found[0], found[1] if width is None else width, found[2]))
    return fields


def _atoi(text: str) -> int:
    """C's atoi: the leading integer of ``text``, 0 if there is none."""
    text = text.strip()
    end = 1 if text[:1] in "+-" else 0
    while end < len(text) and text[end].isdigit():
        end += 1
    try:
        return int(text[:end])
    except ValueError:
        return 0


def acct_lines(
    fields: Sequence[AcctField],
    rows: Iterable[Sequence[str]],
    *,
    header: bool = True,
    parsable: str = "",
    delimiter: str = "|",
) -> list[str]:
    """sacct's output lines (no newlines). ``parsable``: "" fixed columns, "p" every
    field followed by the delimiter, "P" the delimiter only between fields."""
    lines: list[str] = []
    if parsable:
        end = delimiter if parsable == "p" else ""
        if header:
            lines.append(delimiter.join(f.name for f in fields) + end)
        lines.extend(delimiter.join(row) + end for row in rows)
        return lines
    if header:
        lines.append("".join(f.header() + " " for f in fields))
        lines.append("".join("-" * abs(f.width) + " " for f in fields))
    # each column's cut (text marked ``+``, dates cut) is applied down the rows, then
    # one str.format template pads every line: sacct prints 100,000 rows
    template = "".join(
        f"{{:>{f.width}}} " if f.width >= 0 else f"{{:<{-f.width}}} " for f in fields
    ).format
    cuts = [_cutter(f) for f in fields]
    for row in rows:
        cells = [v if c is None else c(v) for c, v in zip(cuts, row, strict=True)]
        lines.append(template(*cells))
    return lines


def _cutter(field: AcctField) -> Callable[[str], str] | None:
    """What ``AcctField.cell`` does to a value before padding it (None: nothing)."""
    size = abs(field.width)
    if field.kind == STR:
        return lambda v: (v[: size - 1] + "+" if size else "") if len(v) > size else v
    if field.kind == DATE:
        return lambda v: v[:size]
    return None
