"""controller.hosts in the config, and the clients' walk along it: a standby's
NotPrimary or a refused connection moves a call on; a request that reached a controller
is never sent to another."""

from __future__ import annotations

import json
import pathlib
import socket
import threading
from collections.abc import Iterator

import pytest

from corral.api import grpc_targets
from corral.config import parse_config
from corral.errors import ConfigError, ControllerUnavailable
from corral.rest import controller_targets, post_any
from ctld.__main__ import which_controller


def test_hosts_as_names_and_tables() -> None:
    cfg = parse_config(
        {
            "controller": {
                "grpc_port": 7000,
                "hosts": [
                    "ctl01",
                    {"host": "ctl02", "grpc_port": 7100, "socket": "/run/b.sock"},
                ],
                "lease_s": 5,
            }
        }
    ).controller
    assert cfg.failover and cfg.lease_s == 5.0
    first, second = cfg.controllers
    assert (first.name, first.grpc_port, first.socket) == ("ctl01", 7000, "/run/corral/ctld.sock")
    assert (second.name, second.grpc_port, second.socket) == ("ctl02", 7100, "/run/b.sock")
    assert cfg.host == "ctl01"  # the table's own address is the first controller's
    me = cfg.as_controller(1)
    assert (me.host, me.grpc_port, me.socket) == ("ctl02", 7100, "/run/b.sock")
    # two on one host: named by their ports
    two = parse_config(
        {"controller": {"hosts": [{"host": "h", "grpc_port": 1}, {"host": "h", "grpc_port": 2}]}}
    ).controller
    assert [c.name for c in two.controllers] == ["h:1", "h:2"]


def test_one_controller_without_hosts() -> None:
    cfg = parse_config({"controller": {"host": "ctl", "grpc_port": 7000}}).controller
    assert not cfg.failover
    assert [(c.name, c.grpc_port) for c in cfg.controllers] == [("ctl", 7000)]


@pytest.mark.parametrize(
    ("controller", "heartbeat", "message"),
    [
        ({"host": "a", "hosts": ["a", "b"]}, {}, "give controller.host or controller.hosts"),
        ({"hosts": ["a", "a"]}, {}, "listed twice"),
        ({"hosts": [{"grpc_port": 1}]}, {}, r"hosts\[0\].host: missing"),
        ({"hosts": [{"host": "a", "bogus": 1}]}, {}, r"hosts\[0\].bogus: unknown key"),
        ({"hosts": [7]}, {}, "expected a host name or a table"),
        ({"hosts": ["a", "b"], "lease_s": 50}, {}, "nodes kill their jobs"),
        ({"hosts": ["a", "b"], "lease_s": 0}, {}, "lease_s: must be > 0"),
    ],
)
def test_bad_hosts_are_refused(
    controller: dict[str, object], heartbeat: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"controller": controller, "heartbeat": heartbeat})


def test_ctld_finds_itself_in_the_list() -> None:
    hosts = parse_config({"controller": {"hosts": ["a", socket.gethostname()]}}).controller
    assert which_controller(hosts.controllers, "") == 1
    assert which_controller(hosts.controllers, "0") == 0
    assert which_controller(hosts.controllers, "a") == 0
    with pytest.raises(ConfigError, match=r"not one of controller\.hosts"):
        which_controller(hosts.controllers, "zz")
    others = parse_config({"controller": {"hosts": ["a", "b"]}}).controller
    with pytest.raises(ConfigError, match="--controller"):
        which_controller(others.controllers, "")


# ---------------------------------------------------------------- the clients' walk


class FakeController:
    """A listening socket that answers each request as told: 'standby' (HTTP 503
    NotPrimary), 'primary' (200), or 'drop' (reads the request, closes unanswered)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.address = ("127.0.0.1", self.sock.getsockname()[1])
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                self.requests += 1
                if self.mode == "drop":
                    continue
                status, body = (
                    (200, {"jobId": "7"})
                    if self.mode == "primary"
                    else (503, {"error": "NotPrimary", "message": "b is a backup controller"})
                )
                data = json.dumps(body).encode()
                conn.sendall(
                    f"HTTP/1.1 {status} X\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data
                )

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def fakes() -> Iterator[list[FakeController]]:
    made: list[FakeController] = []
    yield made
    for f in made:
        f.close()


def _dead_address() -> tuple[str, int]:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return ("127.0.0.1", s.getsockname()[1])


def test_a_call_passes_over_dead_and_standby_controllers(fakes: list[FakeController]) -> None:
    standby, primary = FakeController("standby"), FakeController("primary")
    fakes += [standby, primary]
    targets: list[tuple[str, int] | str] = [_dead_address(), standby.address, primary.address]
    reply, index = post_any(targets, "SubmitJob", {}, lambda t: [], timeout=5)
    assert reply == {"jobId": "7"} and index == 2
    assert (standby.requests, primary.requests) == (1, 1)


def test_no_primary_is_an_error_after_the_timeout(fakes: list[FakeController]) -> None:
    standby = FakeController("standby")
    fakes.append(standby)
    with pytest.raises(ControllerUnavailable, match="no primary controller answered"):
        post_any([_dead_address(), standby.address], "GetJobs", {}, lambda t: [], timeout=0.3)
    assert standby.requests >= 2  # it went round again


def test_a_request_that_reached_a_controller_is_never_resent(fakes: list[FakeController]) -> None:
    dropper, primary = FakeController("drop"), FakeController("primary")
    fakes += [dropper, primary]
    with pytest.raises(ControllerUnavailable):
        post_any([dropper.address, primary.address], "SubmitJob", {}, lambda t: [], timeout=5)
    assert (dropper.requests, primary.requests) == (1, 0)


def test_commands_read_the_list_from_the_config(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = tmp_path / "b.sock"
    sock.touch()  # the second controller's socket is here, the first's is not
    conf = tmp_path / "corral.toml"
    conf.write_text(
        "[controller]\nhttp_port = 7001\nhosts = [\n"
        '  { host = "ctl01", socket = "/nonexistent/a.sock" },\n'
        f'  {{ host = "ctl02", http_port = 7002, socket = "{sock}" }},\n'
        "]\n"
    )
    for var in ("CORRAL_CTLD_HTTP", "CORRAL_CTLD_SOCKET", "CORRAL_CTLD_GRPC"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CORRAL_CONF", str(conf))
    assert controller_targets() == [("ctl01", 7001), str(sock)]
    assert grpc_targets() == ["ctl01:6917", "ctl02:6917"]
    # the environment's lists win (what env.sh of a local cluster sets)
    monkeypatch.setenv("CORRAL_CTLD_HTTP", "h1:1,h2:2")
    monkeypatch.setenv("CORRAL_CTLD_SOCKET", ",/s2")
    monkeypatch.setenv("CORRAL_CTLD_GRPC", "h1:3,h2:4")
    assert controller_targets() == [("h1", 1), "/s2"]
    assert grpc_targets() == ["h1:3", "h2:4"]
