"""What an image reference names: a path (squashfs, OCI layout, archive) or a registry
image in enroot's syntax, ``[USER@][REGISTRY#]IMAGE[:TAG]``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from noded.containers.errors import container_error

DEFAULT_REGISTRY = "docker.io"
_NAME = re.compile(r"^[a-z0-9]+([._/-][a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_REGISTRY = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$")


@dataclass(frozen=True)
class RegistryRef:
    registry: str
    image: str  # library/ubuntu
    tag: str  # "" when pinned by digest only
    digest: str  # "sha256:..." when pinned
    user: str = ""  # enroot's USER@ (credentials are the node's own: not used here)

    def skopeo(self) -> str:
        """skopeo's transport name: docker://REGISTRY/IMAGE[:TAG][@DIGEST]."""
        name = f"docker://{self.registry}/{self.image}"
        if self.digest:
            return f"{name}@{self.digest}"
        return f"{name}:{self.tag or 'latest'}"


def is_path(image: str) -> bool:
    """Pyxis's rule: an image starting with / or . is a file or directory."""
    return image.startswith(("/", "./", "../")) or image in (".", "..")


def parse_registry(image: str) -> RegistryRef:
    """``[USER@][REGISTRY#]IMAGE[:TAG][@sha256:...]``; ContainerError if malformed."""
    rest = image
    user = ""
    if "@" in rest.split("#", 1)[0] and not rest.startswith("sha256:"):
        head, tail = rest.split("@", 1)
        if not tail.startswith("sha256:"):
            user, rest = head, tail
    registry = DEFAULT_REGISTRY
    if "#" in rest:
        registry, rest = rest.split("#", 1)
        if not _REGISTRY.match(registry):
            raise container_error(f"bad registry {registry!r} in image {image!r}")
    digest = ""
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST.match(digest):
            raise container_error(f"bad digest {digest!r} in image {image!r}")
    tag = ""
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
        if not _TAG.match(tag):
            raise container_error(f"bad tag {tag!r} in image {image!r}")
    if not _NAME.match(rest):
        raise container_error(f"bad image name {rest!r} in {image!r}")
    if registry == DEFAULT_REGISTRY and "/" not in rest:
        rest = f"library/{rest}"  # docker's official images
    if not tag and not digest:
        tag = "latest"
    return RegistryRef(registry, rest, tag, digest, user)
