"""Pyxis's ``--container-*`` options for sbatch, srun and salloc (docs/containers.md).

Each is a ``JobOption`` of jobopts' table setting part of ``JobSpec.container`` (the
parts merge); srun sets its step's ``StepSpec.container`` from the same options. As
Pyxis: ``PYXIS_CONTAINER_*`` input variables, below the command line; the
``--X``/``--no-X`` pairs may not both be given in one place (a later layer's word
wins); relative paths are resolved against the job's working directory; without
``--container-image`` or ``--container-name`` the other options are ignored with
Pyxis's warning. The values' syntax is corral/containerspec.py's, imported only when
an option is given (sbatch's start-up).
"""

from __future__ import annotations

from client.options import FLAG, JobOption
from corral.errors import InvalidOption

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def _put(key: str, value: object) -> dict[str, object]:
    return {key: value}


def _split(value: str) -> list[str]:
    return value.split(",")


# fmt: off
CONTAINER_OPTIONS = (
    JobOption("", "container-image", "container_image",
              help="[USER@][REGISTRY#]IMAGE[:TAG]|PATH: run in a container of this image",
              metavar="[USER@][REGISTRY#]IMAGE[:TAG]\\|PATH", fields=("container",),
              put=lambda v: _put("image", v),
              doc="run in a container of this image: a squashfs file, an OCI layout "
              "directory, an OCI or docker archive, or a registry reference "
              "([containers.md](containers.md)); only on nodes with the `container` feature"),
    JobOption("", "container-mounts", "container_mounts",
              help="SRC:DST[:FLAGS][,SRC:DST...]: bind mounts (flags joined with +)",
              metavar="SRC:DST[:FLAGS][,...]", fields=("container",),
              put=lambda v: _put("mounts", _split(v)),
              doc="bind mounts into the container; FLAGS joined with `+` (`ro+rprivate`)"),
    JobOption("", "container-workdir", "container_workdir",
              help="working directory inside the container", metavar="PATH",
              fields=("container",), put=lambda v: _put("workdir", v)),
    JobOption("", "container-name", "container_name",
              help="name the container: kept for the job, reused by its later steps",
              metavar="NAME", fields=("container",), put=lambda v: _put("name", v)),
    JobOption("", "container-save", "container_save",
              help="save the container's filesystem to this squashfs file", metavar="PATH",
              fields=("container",), put=lambda v: _put("save", v)),
    JobOption("", "container-mount-home", "container_mount_home", FLAG,
              help="bind mount the user's home directory (the default)",
              fields=("container",), put=lambda v: _put("noMountHome", False)),
    JobOption("", "no-container-mount-home", "no_container_mount_home", FLAG,
              help="do not bind mount the user's home directory",
              fields=("container",), put=lambda v: _put("noMountHome", True)),
    JobOption("", "container-remap-root", "container_remap_root", FLAG,
              help="be root inside the container (grants nothing outside)",
              fields=("container",), put=lambda v: _put("remapRoot", True)),
    JobOption("", "no-container-remap-root", "no_container_remap_root", FLAG,
              help="keep your own uid inside the container (the default)",
              fields=("container",), put=lambda v: _put("remapRoot", False)),
    JobOption("", "container-writable", "container_writable", FLAG,
              help="make the container's filesystem writable",
              fields=("container",), put=lambda v: _put("writable", True)),
    JobOption("", "container-readonly", "container_readonly", FLAG,
              help="make the container's filesystem read-only (the default)",
              fields=("container",), put=lambda v: _put("writable", False)),
    JobOption("", "container-env", "container_env",
              help="NAME[,NAME...]: these host variables win over the image's",
              metavar="NAME[,NAME...]", fields=("container",),
              put=lambda v: _put("env", _split(v))),
    JobOption("", "container-entrypoint", "container_entrypoint", FLAG,
              help="run the image's entrypoint",
              fields=("container",), put=lambda v: _put("entrypoint", True)),
    JobOption("", "no-container-entrypoint", "no_container_entrypoint", FLAG,
              help="do not run the image's entrypoint (the default, as Pyxis's)",
              fields=("container",), put=lambda v: _put("entrypoint", False)),
)
# fmt: on
DESTS = frozenset(o.dest for o in CONTAINER_OPTIONS)
#: the --X / --no-X pairs: one of each
PAIRS = (
    ("container_mount_home", "no_container_mount_home"),
    ("container_remap_root", "no_container_remap_root"),
    ("container_writable", "container_readonly"),
    ("container_entrypoint", "no_container_entrypoint"),
)
_LONG = {o.dest: o.long for o in CONTAINER_OPTIONS}
#: Pyxis's input variables: a value, or for a pair its first flag's boolean
PYXIS_ENV = {
    "PYXIS_CONTAINER_IMAGE": "container_image",
    "PYXIS_CONTAINER_MOUNTS": "container_mounts",
    "PYXIS_CONTAINER_WORKDIR": "container_workdir",
    "PYXIS_CONTAINER_NAME": "container_name",
    "PYXIS_CONTAINER_SAVE": "container_save",
    "PYXIS_CONTAINER_ENV": "container_env",
}
PYXIS_BOOL_ENV = {
    "PYXIS_CONTAINER_MOUNT_HOME": ("container_mount_home", "no_container_mount_home"),
    "PYXIS_CONTAINER_REMAP_ROOT": ("container_remap_root", "no_container_remap_root"),
    "PYXIS_CONTAINER_WRITABLE": ("container_writable", "container_readonly"),
    "PYXIS_CONTAINER_READONLY": ("container_readonly", "container_writable"),
    "PYXIS_CONTAINER_ENTRYPOINT": ("container_entrypoint", "no_container_entrypoint"),
}
_TRUE = ("1", "true", "yes", "y")
_FALSE = ("0", "false", "no", "n")


def pyxis_layer(environ: dict[str, str]) -> dict[str, Any]:
    """The options Pyxis's input variables give (a boolean it cannot read: ignored,
    as Pyxis does)."""
    out: dict[str, Any] = {}
    for var, dest in PYXIS_ENV.items():
        if environ.get(var):
            out[dest] = environ[var]
    for var, (yes, no) in PYXIS_BOOL_ENV.items():
        word = environ.get(var, "").strip().lower()
        if (word in _TRUE or word in _FALSE) and yes not in out and no not in out:
            out[yes if word in _TRUE else no] = True
    return out


def pyxis_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """Pyxis's input variables alone (srun and salloc read no SBATCH_* variable)."""
    return {k: v for k, v in environ.items() if k.startswith("PYXIS_CONTAINER_")}


def settle_pairs(opts: dict[str, Any], layer: dict[str, Any]) -> None:
    """Before ``layer`` (a later, stronger one) is laid over ``opts``: both flags of a
    pair in it is Pyxis's error; one of them drops the other from ``opts``."""
    for a, b in PAIRS:
        if layer.get(a) and layer.get(b):
            raise InvalidOption(f"both --{_LONG[a]} and --{_LONG[b]} were specified")
        if layer.get(a):
            opts.pop(b, None)
        if layer.get(b):
            opts.pop(a, None)


def container_warnings(opts: dict[str, Any]) -> list[str]:
    """Pyxis's warning for options without an image or a name (they are dropped)."""
    given = sorted(d for d in DESTS if d in opts)
    if not given or "container_image" in opts or "container_name" in opts:
        return []
    names = ", ".join(f"--{_LONG[d]}" for d in given)
    return [f"ignoring {names} because neither --container-image nor --container-name is set"]


def resolve(container: dict[str, Any], cwd: str) -> Any:
    """The JobSpec's (or StepSpec's) container as stored: checked, its relative paths
    made absolute against ``cwd`` (where Pyxis resolves them on the node); None
    without an image or a name."""
    if not container.get("image") and not container.get("name"):
        return None
    from corral import containerspec as cs

    out = dict(container)
    if out.get("image"):
        out["image"] = cs.check_image(out["image"], cwd)
    if "mounts" in out:
        out["mounts"] = cs.parse_mounts(out["mounts"], cwd)
    if "workdir" in out:
        out["workdir"] = cs.check_workdir(out["workdir"])
    if "name" in out:
        out["name"] = cs.check_name(out["name"])
    if "save" in out:
        out["save"] = cs.check_save(out["save"], cwd)
    if "env" in out:
        out["env"] = cs.parse_env_names(out["env"])
    return out


def step_container(cli: dict[str, Any], environ: dict[str, str], cwd: str) -> Any:
    """srun's step container: its flags over Pyxis's input variables (None: none)."""
    opts = pyxis_layer(environ)
    settle_pairs(opts, cli)
    opts.update((k, v) for k, v in cli.items() if k in DESTS)
    container: dict[str, Any] = {}
    for opt in CONTAINER_OPTIONS:
        if opt.dest in opts and opt.put is not None:
            container.update(opt.put(opts[opt.dest]))
    return resolve(container, cwd)
