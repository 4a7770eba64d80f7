from corral.patterns import expand_pattern


def test_slurm_escapes() -> None:
    out = expand_pattern(
        "%x-%j-%u-%N-%A_%a-%%-%q.out", job_id=42, job_name="train", user="alice", node="node01.lab"
    )
    assert out == "train-42-alice-node01-42_0-%-%q.out"


def test_zero_padding() -> None:
    assert expand_pattern("out-%5j", job_id=42, job_name="", user="", node="n") == "out-00042"
