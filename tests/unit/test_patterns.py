from corral.patterns import expand_pattern


def test_slurm_escapes() -> None:
    out = expand_pattern(
        "%x-%j-%u-%N-%A_%a-%%-%q.out", job_id=42, job_name="train", user="alice", node="node01.lab"
    )
    assert out == "train-42-alice-node01-42_0-%-%q.out"


def test_zero_padding() -> None:
    assert expand_pattern("out-%5j", job_id=42, job_name="", user="", node="n") == "out-00042"


def test_array_task_ids_and_step_id() -> None:
    # an array task's own id is 43, its array's master 40, its index 3: %j is 43, %A_%a
    # is 40_3; %J is "jobid.stepid" in a step and the job id alone for the batch script
    kw = {"job_id": 43, "job_name": "n", "user": "u", "node": "h", "array_job_id": 40}
    assert expand_pattern("%A_%a-%j-%J", array_task_id=3, step="0", **kw) == "40_3-43-43.0"
    assert expand_pattern("%A_%a-%J-%s", array_task_id=3, **kw) == "40_3-43-batch"
    assert expand_pattern("%6J", array_task_id=3, step="2", **kw) == "000043.2"
