"""sprio and sshare output, byte for byte, from canned replies."""

from __future__ import annotations

from client.sprio import format_priorities, format_weights
from client.sshare import format_shares

WEIGHTS = {"AGE": 1000, "FAIRSHARE": 10000, "JOBSIZE": 1000, "PARTITION": 0, "QOS": 0}
JOBS = {
    "jobs": [
        {
            "jobId": "7",
            "state": "JOB_STATE_PENDING",
            "partition": "gpu",
            "user": "alice",
            "priority": 5750,
            "priorityFactors": {"age": 0.25, "fairshare": 0.5, "jobSize": 0.5, "nice": 0},
        },
        {"jobId": "8", "state": "JOB_STATE_RUNNING", "priority": 1},
    ]
}


def test_sprio_default_leaves_out_unweighted_factors() -> None:
    out = format_priorities(JOBS, WEIGHTS, "%.15i %9r %.10Y %.10S %.10A %.10B %.10F %.10J %.10P")
    assert out == (
        "          JOBID PARTITION   PRIORITY        AGE  FAIRSHARE    JOBSIZE\n"
        "              7 gpu             5750        250       5000        500\n"
    )


def test_sprio_explicit_format_and_weights() -> None:
    out = format_priorities(JOBS, WEIGHTS, "%i|%a|%f", header=False, default=False)
    assert out == "7|0.2500000|0.5000000\n"
    assert format_weights(WEIGHTS).splitlines()[1].split() == ["Weights", "1000", "10000", "1000"]


def test_sshare_parsable_and_fixed() -> None:
    reply = {
        "rows": [
            {"account": "root", "normShares": 1.0, "rawUsage": 90.4, "effectiveUsage": 1.0},
            {
                "account": "root",
                "user": "alice",
                "depth": 1,
                "rawShares": 1,
                "normShares": 1.0,
                "rawUsage": 90.4,
                "normUsage": 1.0,
                "effectiveUsage": 1.0,
                "fairshare": 0.5,
            },
        ]
    }
    assert format_shares(reply, parsable=True).splitlines() == [
        "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare|",
        "root|||1.000000|90|1.000000||",
        " root|alice|1|1.000000|90|1.000000|0.500000|",
    ]
    fixed = format_shares(reply).splitlines()
    assert fixed[2] == "root" + " " * 42 + "1.000000          90      1.000000" + " " * 12
