"""Pyxis's --container-* values (corral/containerspec.py) and the [containers] section:
what is accepted and stored, and that bad or hostile input is refused with a message
naming the flag and what is wrong."""

from __future__ import annotations

import pytest

from corral import containerspec as cs
from corral.config import parse_config
from corral.config.containers import DEFAULT_CACHE_SIZE, parse_size_bytes
from corral.errors import ConfigError, InvalidOption


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("nvcr.io#nvidia/pytorch:24.05-py3", "nvcr.io#nvidia/pytorch:24.05-py3"),
        ("ubuntu:22.04", "ubuntu:22.04"),
        ("ubuntu", "ubuntu"),
        ("alice@nvcr.io#nvidia/pytorch", "alice@nvcr.io#nvidia/pytorch"),
        ("localhost:5000#tools/busybox:1.36", "localhost:5000#tools/busybox:1.36"),
        ("ubuntu@sha256:" + "ab" * 32, "ubuntu@sha256:" + "ab" * 32),
        ("/images/app.sqsh", "/images/app.sqsh"),
        ("./app.sqsh", "/work/app.sqsh"),
        ("../oci/layout", "/oci/layout"),
    ],
)
def test_an_image_is_a_path_or_an_enroot_reference(given: str, stored: str) -> None:
    assert cs.check_image(given, "/work") == stored


@pytest.mark.parametrize(
    ("image", "words"),
    [
        ("", "argument required"),
        ("Ubuntu", "registry reference"),
        ("ubuntu:", "bad tag"),
        ("#ubuntu", "bad registry"),
        ("ubuntu@sha256:abc", "bad digest"),
        ("a b", "space"),
        ("ubuntu\n", "control character"),
        ("x" * 2000, "longer than 1024"),
        ("./rel.sqsh", "must be absolute"),  # ctld's check: no working directory
    ],
)
def test_a_bad_image_is_refused_naming_the_problem(image: str, words: str) -> None:
    with pytest.raises(InvalidOption, match=words):
        cs.check_image(image)


def test_mounts_are_stored_absolute_with_their_flags() -> None:
    got = cs.parse_mounts("/data:/data:ro+rprivate,./x:/x,/scratch,tmpfs:/tmp", "/work")
    assert got == ["/data:/data:ro+rprivate", "/work/x:/x", "/scratch:/scratch", "tmpfs:/tmp"]
    assert cs.parse_mounts(got) == got  # ctld's check of what was stored: the same


@pytest.mark.parametrize(
    ("mounts", "words"),
    [
        ("", "argument required"),
        ("data:/data", "absolute path, ./PATH or tmpfs"),
        ("/a:b", "target must be an absolute path"),
        ("/a:/b/../../etc", "must not contain '..'"),
        ("/a:/b:suid", "unknown mount flag 'suid'"),
        ("/a:/b:ro+rw", "both ro and rw"),
        ("/a:/b:ro:x", "invalid format"),
        ("/a::ro", "invalid format"),
        ("tmpfs", "needs a target"),
        (",".join(["/a:/b"] * 65), "more than 64"),
        ("/a:/" + "b" * 5000, "longer than 4096"),
        ("/a:/proc/self", "cannot mount over /proc/self"),  # refused at submit, not on the node
        ("/a:/sys", "cannot mount over /sys"),
        ("/a:/./", "cannot mount over /$"),
    ],
)
def test_bad_mounts_are_refused(mounts: str, words: str) -> None:
    with pytest.raises(InvalidOption, match=words):
        cs.parse_mounts(mounts, "/work")


def test_names_env_workdir_and_save() -> None:
    assert cs.check_name("train-1.x_y") == "train-1.x_y"
    assert cs.check_name("n:auto") == "n"
    for bad, words in (
        ("", "empty name"),
        (".hidden", "letters, digits"),
        ("a/b", "letters, digits"),
        ("n" * 65, "longer than 64"),
        ("n:exec", "only the default mode"),
    ):
        with pytest.raises(InvalidOption, match=words):
            cs.check_name(bad)
    assert cs.parse_env_names("A,B_2,A") == ["A", "B_2"]
    for bad in ("", "1A", "A-B", "A,,B", ",".join(f"V{i}" for i in range(300))):
        with pytest.raises(InvalidOption, match="--container-env"):
            cs.parse_env_names(bad)
    assert cs.check_workdir("/opt") == "/opt"
    with pytest.raises(InvalidOption, match="absolute"):
        cs.check_workdir("opt")
    assert cs.check_save("out.sqsh", "/work") == "/work/out.sqsh"
    with pytest.raises(InvalidOption, match="is a directory"):
        cs.check_save("/out/", "/work")


def test_ctlds_check_of_a_stored_spec() -> None:
    base = {"image": "", "mounts": [], "workdir": "", "name": "", "save": "", "env": []}
    cs.check(**base)  # no container
    with pytest.raises(InvalidOption, match="need --container-image or --container-name"):
        cs.check(**{**base, "mounts": ["/a:/a"]})
    cs.check(**{**base, "name": "keep"})  # a named container of an earlier step
    cs.check(**{**base, "image": "ubuntu", "mounts": ["/a:/b:ro"], "env": ["PATH"]})
    with pytest.raises(InvalidOption, match="registry images are not allowed"):
        cs.check(**{**base, "image": "ubuntu"}, allowed_sources=("squashfs",))
    cs.check(**{**base, "image": "/i.sqsh"}, allowed_sources=("squashfs",))


def test_the_containers_section_defaults_and_values() -> None:
    d = parse_config({}).containers
    assert (d.runtime, d.cache_size_bytes, d.allow_registry_pulls) == (
        "crun",
        DEFAULT_CACHE_SIZE,
        True,
    )
    assert d.allowed_sources == ("squashfs", "oci-dir", "archive", "registry")
    assert d.cache_path("/var/spool/corral/") == "/var/spool/corral/containers/cache"
    assert d.data_path("/s") == "/s/containers/data"
    c = parse_config(
        {
            "containers": {
                "runtime": "/usr/bin/runc",
                "cache_dir": "/var/cache/corral",
                "cache_size": "20G",
                "data_dir": "/run/corral-ctr",
                "default_mounts": ["/etc/hosts:/etc/hosts:ro", "/opt/tools"],
                "allow_registry_pulls": False,
                "allowed_sources": ["squashfs", "oci-dir"],
            }
        }
    ).containers
    assert c.cache_size_bytes == 20 * 1024**3 and c.runtime == "/usr/bin/runc"
    assert c.default_mounts == ("/etc/hosts:/etc/hosts:ro", "/opt/tools:/opt/tools")
    assert c.allowed_sources == ("squashfs", "oci-dir") and not c.allow_registry_pulls
    assert (c.cache_path("/s"), c.data_path("/s")) == ("/var/cache/corral", "/run/corral-ctr")


@pytest.mark.parametrize(
    ("section", "words"),
    [
        ({"runtime": ""}, "containers.runtime"),
        ({"cache_dir": "rel"}, "containers.cache_dir: 'rel' is not an absolute path"),
        ({"cache_size": "lots"}, "containers.cache_size: 'lots' is not a size"),
        ({"cache_size": 0}, "containers.cache_size: must be > 0"),
        ({"allowed_sources": ["docker"]}, "containers.allowed_sources: 'docker'"),
        ({"default_mounts": ["rel:/x"]}, "containers.default_mounts: .*source"),
        ({"allow_registry_pulls": "yes"}, "containers.allow_registry_pulls: expected a boolean"),
        ({"cache_dir": "/a", "data_dir": "/a/"}, "must differ"),
        ({"runtim": "crun"}, "containers.runtim: unknown key"),
    ],
)
def test_a_bad_containers_section_names_its_key(section: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_config({"containers": section})


def test_sizes() -> None:
    assert parse_size_bytes(1000, "k") == 1000
    assert parse_size_bytes("500M", "k") == 500 * 1024**2
    assert parse_size_bytes("2TiB", "k") == 2 * 1024**4
    assert parse_size_bytes("1 GB", "k") == 1024**3


def test_ctld_parses_the_mounts_once_into_the_spec_and_ignores_a_clients_own() -> None:
    # what noded mounts is what ctld parsed at submit (ContainerSpec.parsed_mounts)
    from corral.config import ClusterConfig
    from corral.wire import corral_pb2 as pb
    from ctld.model.validate import check_container

    spec = pb.ContainerSpec(image="/i.sqsh", mounts=["/data:/in:ro+rprivate", "tmpfs:/fast"])
    spec.parsed_mounts.add(source="/etc/shadow", target="/x")  # forged by a client
    check_container(spec, ClusterConfig())
    got = [(m.source, m.target, m.read_only, m.no_exec) for m in spec.parsed_mounts]
    assert got == [("/data", "/in", True, False), ("tmpfs", "/fast", False, False)]
