"""An OCI image layout, as root's staged copy: tag its image for umoci, read the image
config (Env, Entrypoint, WorkingDir) a container starts with, and check that the
layout really holds the image it names.

Every blob read here is checked against its digest first: an index.json is the
user's to write, and naming a digest proves nothing about having the image."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from noded.containers.errors import container_error

REF_NAME = "org.opencontainers.image.ref.name"
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MAX_JSON = 4 << 20  # a manifest or config larger than this is not an image's
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class ImageConfig:
    manifest: str = ""  # the digest of the image's manifest, checked
    env: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    workdir: str = ""
    layers: list[str] = field(default_factory=list)  # their digests, not yet checked


def _path(layout: str, digest: str, source: str) -> str:
    algo, _, hexpart = str(digest).partition(":")
    if algo != "sha256" or len(hexpart) != 64 or not set(hexpart) <= _HEX:
        raise container_error(f"image {source}: not an image (bad digest {digest!r})")
    return os.path.join(layout, "blobs", algo, hexpart)


def _mismatch(source: str, digest: str) -> Exception:
    return container_error(f"image {source}: digest mismatch (blob {digest})")


def _blob(layout: str, digest: str, source: str) -> dict[str, Any]:
    path = _path(layout, digest, source)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JSON + 1)
    except OSError:
        raise container_error(f"image {source}: not an image (blob {digest} missing)") from None
    if len(data) > MAX_JSON:
        raise container_error(f"image {source}: not an image (blob {digest} too large)")
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise _mismatch(source, digest)
    try:
        value = json.loads(data)
    except ValueError:
        raise container_error(f"image {source}: not an image (blob {digest} is not JSON)") from None
    if not isinstance(value, dict):
        raise container_error(f"image {source}: not an image (blob {digest})")
    return value


def tag_layout(layout: str, tag: str, source: str) -> ImageConfig:
    """Keep the layout's first image, named ``tag`` (umoci unpacks by name); its config.
    A multi-platform index is resolved to its linux/amd64 (or only) image."""
    try:
        return _tag_layout(layout, tag, source)
    except (KeyError, TypeError, AttributeError, ValueError):  # JSON of the wrong shape
        raise container_error(f"image {source}: not an image (a malformed OCI index)") from None


def _tag_layout(layout: str, tag: str, source: str) -> ImageConfig:
    index_path = os.path.join(layout, "index.json")
    try:
        with open(index_path, encoding="utf-8") as f:
            index = json.load(f)
        desc = dict(index["manifests"][0])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        raise container_error(f"image {source}: not an image (no OCI index.json)") from None
    if desc.get("mediaType") in INDEX_TYPES:
        nested = _blob(layout, desc["digest"], source).get("manifests") or []
        chosen = [m for m in nested if (m.get("platform") or {}).get("architecture") == "amd64"]
        if not (chosen or nested):
            raise container_error(f"image {source}: not an image (an empty index)")
        desc = dict((chosen or nested)[0])
    desc.setdefault("annotations", {})
    desc["annotations"][REF_NAME] = tag
    index["manifests"] = [desc]
    with open(index_path, "w", encoding="utf-8") as f:
        json.dump(index, f)
    manifest = _blob(layout, desc["digest"], source)
    try:
        config_digest = manifest["config"]["digest"]
    except (KeyError, TypeError):
        raise container_error(f"image {source}: not an image (a manifest without config)") from None
    config = _blob(layout, config_digest, source).get("config") or {}
    try:
        layers = [str(layer["digest"]) for layer in manifest.get("layers") or []]
    except (KeyError, TypeError):
        raise container_error(f"image {source}: not an image (a layer without digest)") from None
    return ImageConfig(
        manifest=str(desc["digest"]),
        env=[str(e) for e in config.get("Env") or []],
        entrypoint=[str(e) for e in config.get("Entrypoint") or []],
        workdir=str(config.get("WorkingDir") or ""),
        layers=layers,
    )


def check_layers(layout: str, config: ImageConfig, source: str) -> None:
    """Every layer blob of the image is in the layout, with its digest: the layout
    holds the whole image, not only its name (umoci checks the same as it unpacks)."""
    for digest in config.layers:
        h = hashlib.sha256()
        try:
            with open(_path(layout, digest, source), "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        except OSError:
            raise container_error(f"image {source}: not an image (blob {digest} missing)") from None
        if "sha256:" + h.hexdigest() != digest:
            raise _mismatch(source, digest)
