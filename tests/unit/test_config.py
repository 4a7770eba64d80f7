import pathlib

import pytest

from corral.config import load_config, parse_config
from corral.errors import ConfigError

GOOD = {
    "cluster_name": "lab",
    "controller": {"grpc_port": 7000, "state_dir": "/tmp/x"},
    "nodes": [{"names": "gpu[01-04]", "gpus": {"count": 8}}],
    "partitions": [
        {
            "name": "gpu",
            "nodes": "gpu[01-04]",
            "default": True,
            "max_time": "2-00:00:00",
            "default_time": "1:00:00",
        }
    ],
}


def test_good_config_parses_with_defaults() -> None:
    cfg = parse_config(GOOD)
    assert cfg.cluster_name == "lab"
    assert cfg.node_names == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert cfg.nodes[0].gpus.backend == "fake"
    part = cfg.default_partition
    assert part is not None
    assert (part.max_time_s, part.default_time_s) == (2 * 86400, 3600)
    assert cfg.controller.effective_store_url == "sqlite:////tmp/x/corral.db"
    assert cfg.controller.purge_job_after_s == 0  # by default the store keeps every job


def test_job_retention_keys() -> None:
    import copy

    data = copy.deepcopy(GOOD)
    data["controller"].update(purge_job_after="365-00:00:00", archive_dir="/srv/corral/archive")
    ctl = parse_config(data).controller
    assert ctl.purge_job_after_s == 365 * 86400 and ctl.archive_dir == "/srv/corral/archive"


def test_stack_forecasts_is_a_count() -> None:
    assert parse_config(GOOD).scheduler.stack_forecasts == 0
    cfg = parse_config({**GOOD, "scheduler": {"stack_forecasts": 16}})
    assert cfg.scheduler.stack_forecasts == 16
    with pytest.raises(ConfigError, match=r"scheduler\.stack_forecasts"):
        parse_config({**GOOD, "scheduler": {"stack_forecasts": -1}})


def test_starvation_guard_is_a_duration() -> None:
    cfg = parse_config({**GOOD, "scheduler": {"starvation_guard": "12:00:00"}})
    assert cfg.scheduler.starvation_guard_s == 12 * 3600
    assert (
        parse_config({**GOOD, "scheduler": {"starvation_guard": 0}}).scheduler.starvation_guard_s
        == 0
    )
    with pytest.raises(ConfigError, match=r"scheduler\.starvation_guard"):
        parse_config({**GOOD, "scheduler": {"starvation_guard": "a while"}})


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["controller"].update(grpc_port="x"), "controller.grpc_port: expected an"),
        (lambda d: d["controller"].update(grpc_prot=1), "controller.grpc_prot: unknown key"),
        (lambda d: d["controller"].update(purge_job_after="a year"), "purge_job_after"),
        (lambda d: d["partitions"][0].update(max_time="soon"), "partitions[0].max_time"),
        (lambda d: d["partitions"][0].update(nodes="cpu01"), "partitions[0].nodes: 'cpu01'"),
        (lambda d: d["nodes"][0].update(names="gpu[01-"), "nodes[0].names"),
        (lambda d: d["nodes"][0]["gpus"].update(backend="cuda"), "nodes[0].gpus.backend"),
        (lambda d: d.update(heartbeat={"interval_s": 10, "timeout_s": 5}), "heartbeat.timeout_s"),
        (lambda d: d["partitions"].append({**d["partitions"][0], "name": "b"}), "more than one"),
    ],
)
def test_bad_config_names_the_key(mutate: object, message: str) -> None:
    import copy

    data = copy.deepcopy(GOOD)
    mutate(data)  # type: ignore[operator]
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert message in str(err.value)


def test_load_config_reports_file_and_toml_errors(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "corral.toml"
    path.write_text("cluster_name = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.toml"))


def test_example_configs_in_deploy_are_valid() -> None:
    root = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "examples"
    examples = sorted(root.glob("*.toml"))
    assert examples, "deploy/examples has no example config"
    for path in examples:
        cfg = load_config(str(path))
        # nothing binds every interface (issue 12: lab-4node.toml once bound ctld to it)
        binds = [c.listen or c.host for c in cfg.controller.controllers] + [cfg.noded.listen]
        assert not {"0.0.0.0", "::"} & set(binds), (path.name, binds)


def test_negative_durations_and_duplicate_qos_are_refused() -> None:
    from corral.config import parse_config
    from corral.errors import ConfigError

    base = {"nodes": [{"names": "n1"}]}
    with pytest.raises(ConfigError, match=r"partitions\[0\].max_time: a duration"):
        parse_config({**base, "partitions": [{"name": "p", "nodes": "n1", "max_time": -5}]})
    with pytest.raises(ConfigError, match=r"qos\[1\].name: QOS 'gpu' is defined twice"):
        parse_config({**base, "qos": [{"name": "gpu"}, {"name": "gpu"}]})
