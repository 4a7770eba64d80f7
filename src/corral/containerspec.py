"""Pyxis's ``--container-*`` values: their one parser and checker (docs/containers.md).

sbatch, srun and salloc call it for early, clear errors and to make relative paths
absolute (against the job's working directory, where Pyxis resolves them on the
node); ctld calls it again on every spec it is sent (``check``), whatever the client
did, so hostile input is bounded before a job is stored; the ``[containers]`` config
reads its ``default_mounts`` with it. Pure standard library, no ``re`` (sbatch's
start-up), no protobuf: ctld hands plain values.
"""

from __future__ import annotations

from corral.errors import InvalidOption

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

MAX_IMAGE = 1024  # characters of --container-image
MAX_PATH = 4096  # a path (mount source or target, workdir, save)
MAX_MOUNTS = 64  # entries of --container-mounts
MAX_ENV_NAMES = 256  # names in --container-env
MAX_ENV_NAME = 256
MAX_NAME = 64  # --container-name

#: image sources an operator may allow ([containers] allowed_sources)
SOURCES = ("squashfs", "oci-dir", "archive", "registry")
#: mount flags (Pyxis separates them with "+": ``ro+rprivate``)
MOUNT_FLAGS = frozenset(
    {
        "ro",
        "rw",
        "bind",
        "rbind",
        "private",
        "rprivate",
        "slave",
        "rslave",
        "shared",
        "rshared",
        "nosuid",
        "nodev",
        "noexec",
        "x-create=auto",
        "x-create=dir",
        "x-create=file",
    }
)
#: --container-name's suffix: only Pyxis's default (reuse, else create) is built
NAME_MODES = ("auto",)

_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_NAME_CHARS = _ALNUM | frozenset("_.-")
_ENV_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_ENV_CHARS = _ENV_START | frozenset("0123456789")
_REPO_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-/")
_TAG_CHARS = _NAME_CHARS
_HOST_CHARS = _ALNUM | frozenset(".-:")
_USER_CHARS = _ALNUM | frozenset("._-+$")
_HEX = frozenset("0123456789abcdef")


def _printable(value: str, what: str, limit: int) -> None:
    if len(value) > limit:
        raise InvalidOption(f"{what}: longer than {limit} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidOption(f"{what}: contains a control character")


def _absolute(path: str, cwd: str) -> str:
    import posixpath

    return posixpath.normpath(path if path.startswith("/") else posixpath.join(cwd, path))


def is_path_image(image: str) -> bool:
    """Pyxis's rule: an image starting with ``/`` or ``.`` is a file on the node (a
    squashfs file, an OCI layout directory or an archive); anything else a registry
    reference in enroot's syntax."""
    return image.startswith(("/", "."))


def check_image(image: str, cwd: str = "") -> str:
    """The image as the job stores it: a path made absolute, or a checked registry
    reference ``[USER@][REGISTRY#]IMAGE[:TAG|@sha256:DIGEST]``."""
    what = f"--container-image={image[:80]}"
    if not image:
        raise InvalidOption("--container-image: argument required")
    _printable(image, what, MAX_IMAGE)
    if " " in image:
        raise InvalidOption(f"{what}: contains a space")
    if is_path_image(image):
        if not image.startswith("/") and not cwd:
            raise InvalidOption(f"{what}: an image path must be absolute")
        return _absolute(image, cwd)
    check_reference(image, what)
    return image


def check_reference(ref: str, what: str) -> None:
    """enroot's ``[USER@][REGISTRY#]IMAGE[:TAG]`` (or ``IMAGE@sha256:DIGEST``)."""
    rest = ref.removeprefix("docker://")
    hash_at = rest.find("#")
    at = rest.find("@")
    digest_at = rest[at + 1 :].startswith("sha256:")
    if at >= 0 and (hash_at < 0 or at < hash_at) and "/" not in rest[:at] and not digest_at:
        user, rest = rest[:at], rest[at + 1 :]
        if not user or not set(user) <= _USER_CHARS:
            raise InvalidOption(f"{what}: bad user {user!r} (USER@REGISTRY#IMAGE)")
    if "#" in rest:
        registry, rest = rest.split("#", 1)
        if not registry or not set(registry) <= _HOST_CHARS or "#" in rest:
            raise InvalidOption(f"{what}: bad registry {registry!r} (REGISTRY#IMAGE)")
    image, digest = rest, ""
    if "@" in rest:
        image, digest = rest.split("@", 1)
        algo, _, hexdigits = digest.partition(":")
        if algo != "sha256" or len(hexdigits) != 64 or not set(hexdigits) <= _HEX:
            raise InvalidOption(f"{what}: bad digest {digest!r} (IMAGE@sha256:64 hex digits)")
    last_colon = image.rfind(":")
    if not digest and last_colon > image.rfind("/"):
        repo, tag = image[:last_colon], image[last_colon + 1 :]
        if not tag or len(tag) > 128 or not set(tag) <= _TAG_CHARS:
            raise InvalidOption(f"{what}: bad tag {tag!r}")
    else:
        repo = image
    if not repo or not set(repo) <= _REPO_CHARS or repo.startswith(("/", "-", ".")):
        raise InvalidOption(
            f"{what}: not an image path (starts with / or .) nor a registry reference "
            "[USER@][REGISTRY#]IMAGE[:TAG] (lower-case IMAGE)"
        )
    if "//" in repo or ".." in repo:
        raise InvalidOption(f"{what}: bad image name {repo!r}")


def parse_mount(entry: str, cwd: str = "") -> str:
    """One ``SRC[:DST[:FLAGS]]`` of --container-mounts, as stored: ``SRC:DST[:FLAGS]``
    with SRC absolute (or ``tmpfs``), DST absolute, FLAGS ``+``-separated and known."""
    what = f"--container-mounts: {entry[:120]!r}"
    _printable(entry, what, 2 * MAX_PATH + 256)
    parts = entry.split(":")
    if len(parts) > 3 or not parts[0]:
        raise InvalidOption(f"{what}: invalid format (SRC:DST[:FLAGS])")
    src = parts[0]
    dst = parts[1] if len(parts) > 1 else src
    flags = parts[2] if len(parts) > 2 else ""
    if not dst:
        raise InvalidOption(f"{what}: invalid format (SRC:DST[:FLAGS])")
    if src == "tmpfs":
        if len(parts) < 2:
            raise InvalidOption(f"{what}: tmpfs needs a target (tmpfs:DST)")
    elif src.startswith("/") or (src.startswith(".") and cwd):
        src = _absolute(src, cwd)
    else:  # Pyxis: a path (absolute, or ./relative to the working directory) or tmpfs
        raise InvalidOption(f"{what}: the source must be an absolute path, ./PATH or tmpfs")
    if len(parts) == 1:
        dst = src
    if not dst.startswith("/"):
        raise InvalidOption(f"{what}: the target must be an absolute path inside the container")
    if ".." in dst.split("/"):
        raise InvalidOption(f"{what}: the target must not contain '..'")
    for path in (src, dst):
        if len(path) > MAX_PATH:
            raise InvalidOption(f"{what}: a path longer than {MAX_PATH} characters")
    names = [f for f in flags.split("+") if f] if flags else []
    unknown = [f for f in names if f not in MOUNT_FLAGS]
    if unknown:
        raise InvalidOption(
            f"{what}: unknown mount flag {unknown[0]!r} (known: {', '.join(sorted(MOUNT_FLAGS))})"
        )
    if "ro" in names and "rw" in names:
        raise InvalidOption(f"{what}: both ro and rw")
    dst = "/" + "/".join(p for p in dst.split("/") if p and p != ".")
    if dst in ("/", "/proc", "/sys", "/dev") or dst.startswith(("/proc/", "/sys/")):
        raise InvalidOption(f"{what}: cannot mount over {dst}")
    return f"{src}:{dst}:{'+'.join(names)}" if names else f"{src}:{dst}"


def mount_fields(entry: str) -> tuple[str, str, frozenset[str]]:
    """A stored entry (what parse_mount returns) as (SRC, DST, FLAGS): its one reading,
    which ctld turns into the job's parsed mounts."""
    src, dst, *rest = entry.split(":")
    return src, dst, frozenset(rest[0].split("+")) if rest else frozenset()


def parse_mounts(value: str | Iterable[str], cwd: str = "") -> list[str]:
    """--container-mounts (comma separated, or entries already split)."""
    entries = value.split(",") if isinstance(value, str) else list(value)
    if len(entries) > MAX_MOUNTS:
        raise InvalidOption(f"--container-mounts: more than {MAX_MOUNTS} mounts")
    if isinstance(value, str) and not value:
        raise InvalidOption("--container-mounts: argument required")
    return [parse_mount(e, cwd) for e in entries]


def check_name(value: str) -> str:
    """--container-name=NAME[:auto]: letters, digits, ``_ . -``, not starting with
    ``.`` or ``-`` (it names a directory on the node), at most 64."""
    name, _, mode = value.partition(":")
    what = f"--container-name={value[:80]}"
    if not name:
        raise InvalidOption("--container-name: empty name")
    if mode and mode not in NAME_MODES:
        raise InvalidOption(
            f"{what}: only the default mode ':auto' is supported (Pyxis's create, exec "
            "and no_exec are not)"
        )
    if len(name) > MAX_NAME:
        raise InvalidOption(f"{what}: longer than {MAX_NAME} characters")
    if not set(name) <= _NAME_CHARS or name[0] in ".-":
        raise InvalidOption(
            f"{what}: a name is letters, digits, '_', '.' and '-', not starting with '.' or '-'"
        )
    return name


def check_workdir(value: str) -> str:
    _printable(value, "--container-workdir", MAX_PATH)
    if not value.startswith("/"):
        raise InvalidOption(f"--container-workdir={value[:80]}: must be an absolute path")
    return value


def check_save(value: str, cwd: str = "") -> str:
    _printable(value, "--container-save", MAX_PATH)
    if not value:
        raise InvalidOption("--container-save: argument required")
    if value.endswith("/"):
        raise InvalidOption("--container-save: target is a directory")
    if not value.startswith("/") and not cwd:
        raise InvalidOption(f"--container-save={value[:80]}: must be an absolute path")
    return _absolute(value, cwd)


def parse_env_names(value: str | Iterable[str]) -> list[str]:
    """--container-env=NAME[,NAME...]: environment variable names, each once."""
    names = value.split(",") if isinstance(value, str) else list(value)
    if len(names) > MAX_ENV_NAMES:
        raise InvalidOption(f"--container-env: more than {MAX_ENV_NAMES} names")
    for name in names:
        if (
            not name
            or len(name) > MAX_ENV_NAME
            or name[0] not in _ENV_START
            or not set(name) <= _ENV_CHARS
        ):
            raise InvalidOption(f"--container-env: invalid variable name {name[:80]!r}")
    return list(dict.fromkeys(names))


def image_source(image: str) -> str:
    """What ctld can tell of an image's source at submit: ``registry`` for a
    reference; a path's kind (squashfs, oci-dir, archive) is only known on the node."""
    return "" if is_path_image(image) else "registry"


def check(
    *,
    image: str,
    mounts: Iterable[str],
    workdir: str,
    name: str,
    save: str,
    env: Iterable[str],
    allowed_sources: Iterable[str] = SOURCES,
) -> None:
    """ctld's check of a stored spec (paths already absolute): raises InvalidOption."""
    mounts, env = list(mounts), list(env)
    if not image and not name:
        if mounts or workdir or save or env:
            raise InvalidOption(
                "--container-mounts, --container-workdir, --container-save and "
                "--container-env need --container-image or --container-name"
            )
        return
    if image:
        check_image(image)
        if image_source(image) == "registry" and "registry" not in allowed_sources:
            raise InvalidOption(
                f"--container-image={image[:80]}: registry images are not allowed on this "
                "cluster ([containers] allowed_sources); give a squashfs file, an OCI "
                "layout directory or an archive"
            )
    parse_mounts(mounts)
    if workdir:
        check_workdir(workdir)
    if name and name != check_name(name):
        raise InvalidOption(f"--container-name={name[:80]}: a name without a mode")
    if save:
        check_save(save)
    parse_env_names(env)
