"""Authentication and authorization in ctld, without daemons: identity, roles, limits."""

from __future__ import annotations

import os
import pathlib
import pwd

import pytest

from corral import limits
from corral.auth import tokens
from corral.auth.users import identity_of
from corral.config import AuthConfig, parse_config
from corral.errors import ConfigError, PermissionDenied, TooLarge, Unauthenticated
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.api.auth import Caller, ClusterAuthenticator
from ctld.model.authz import Policy, Role, scrub_submit_line

KEY = b"k" * 32
ROOT = pwd.getpwuid(0)
NOBODY = pwd.getpwnam("nobody")


def auth(jwt: bool = True) -> ClusterAuthenticator:
    return ClusterAuthenticator(AuthConfig(), KEY if jwt else None)


def test_kernel_identity_wins_over_any_claim() -> None:
    forged = {"x-corral-user": "root", "x-corral-uid": "0", "x-corral-gid": "42"}
    who = auth().identify(Caller(forged, "SubmitJob", NOBODY.pw_uid, NOBODY.pw_gid))
    assert who == Identity("nobody", NOBODY.pw_uid, NOBODY.pw_gid)


def test_claimed_headers_alone_are_no_identity() -> None:
    forged = {"x-corral-user": "root", "x-corral-uid": "0", "x-corral-gid": "0"}
    with pytest.raises(Unauthenticated):
        auth().identify(Caller(forged, "SubmitJob"))


def test_a_group_the_user_is_not_in_is_refused() -> None:
    shadow_gid = 42  # group shadow on Debian; nobody is not a member
    assert shadow_gid not in os.getgrouplist("nobody", NOBODY.pw_gid)
    with pytest.raises(PermissionDenied, match="not a member of group 42"):
        auth().identify(Caller({}, "SubmitJob", NOBODY.pw_uid, shadow_gid))
    with pytest.raises(PermissionDenied, match="not a known user"):
        identity_of(4_000_000_123)


def test_jwt_names_the_user_and_must_verify() -> None:
    good = tokens.issue(KEY, "nobody", 60)
    who = auth().identify(Caller({"authorization": f"Bearer {good}"}, "GetJobs"))
    assert who == Identity("nobody", NOBODY.pw_uid, NOBODY.pw_gid)
    expired = tokens.issue(KEY, "nobody", 60, now=1000.0)
    with pytest.raises(PermissionDenied, match="expired"):
        auth().identify(Caller({"authorization": f"Bearer {expired}"}, "GetJobs"))
    forged = tokens.issue(b"x" * 32, "root", 60)
    with pytest.raises(PermissionDenied, match="invalid token"):
        auth().identify(Caller({"authorization": f"Bearer {forged}"}, "GetJobs"))
    with pytest.raises(Unauthenticated):  # tokens not accepted without a key
        auth(jwt=False).identify(Caller({"authorization": f"Bearer {good}"}, "GetJobs"))


def test_jwt_key_and_token_files_must_be_owner_only(tmp_path: pathlib.Path) -> None:
    key = tmp_path / "jwt.key"
    tokens.write_key(str(key))
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert len(tokens.read_key(str(key))) == tokens.KEY_BYTES
    key.chmod(0o644)
    with pytest.raises(ConfigError, match="owner only"):
        tokens.read_key(str(key))
    token_file = tmp_path / "token"
    token_file.write_text("abc\n")
    token_file.chmod(0o644)
    with pytest.raises(PermissionDenied, match="readable by you only"):
        tokens.read_token_file(str(token_file))
    token_file.chmod(0o600)
    assert tokens.read_token_file(str(token_file)) == "abc"


def test_roles_are_by_uid_never_by_name() -> None:
    policy = Policy(operators=["daemon"], administrators=["root"])
    daemon = pwd.getpwnam("daemon")
    assert policy.role(Identity("root", 0, 0)) is Role.ADMIN
    assert policy.role(Identity("daemon", daemon.pw_uid, daemon.pw_gid)) is Role.OPERATOR
    # the name "root" or "daemon" with another uid is a plain user
    assert policy.role(Identity("root", 4242, 4242)) is Role.USER
    assert policy.role(Identity("daemon", 4242, 4242)) is Role.USER
    with pytest.raises(PermissionDenied, match="needs an administrator"):
        policy.check_admin(Identity("daemon", daemon.pw_uid, 1), "creating a reservation")


def test_private_data_and_spec_visibility() -> None:
    policy = Policy(operators=(), private_data=["jobs"])
    job = pb.Job(job_id=7, uid=1000, user="alice")
    bob = Identity("bob", 1001, 1001)
    assert not policy.may_see(bob, job) and not policy.sees_spec(bob, job)
    assert policy.may_see(Identity("alice", 1000, 1000), job)
    assert policy.may_see(Identity("root", 0, 0), job)
    open_policy = Policy(operators=())
    assert open_policy.may_see(bob, job) and not open_policy.sees_spec(bob, job)


def test_export_values_are_hidden_from_others() -> None:
    line = "sbatch --export=ALL,TOKEN=s3cret --wrap 'x'"
    assert scrub_submit_line(line) == "sbatch --export=<hidden> --wrap <hidden>"
    assert "s3cret" not in scrub_submit_line("sbatch --export TOKEN=s3cret job.sh")
    # the commands take unambiguous prefixes of long options: --wra is --wrap
    assert scrub_submit_line("sbatch -H --wra 'echo s3cret'") == "sbatch -H --wrap <hidden>"
    assert scrub_submit_line("srun --expo=K=s3cret x") == "srun --export=<hidden> x"
    assert scrub_submit_line("sbatch --exclusive --wckey=w x") == "sbatch --exclusive --wckey=w x"


def test_one_scrub_covers_the_job_and_its_steps() -> None:
    # srun's submit line carries its own --export: a step's is scrubbed with the job's
    policy = Policy(operators=())
    alice, bob = Identity("alice", 1000, 1000), Identity("bob", 1001, 1001)
    job = pb.Job(job_id=7, uid=1000, user="alice")
    job.spec.script = "#!/bin/sh\necho s3cret\n"
    job.spec.environment["TOKEN"] = "s3cret"
    job.spec.export = "ALL,TOKEN=s3cret"
    job.spec.submit_line = "sbatch --export=ALL,TOKEN=s3cret job.sh"
    job.steps.add(step_id=0).spec.submit_line = "srun --export=ALL,STEP=s3cret env"
    assert policy.shown(alice, job) is job  # the owner's own, uncopied
    seen = policy.shown(bob, job)
    assert "s3cret" not in str(seen)
    assert seen.steps[0].spec.submit_line == "srun --export=<hidden> env"
    assert seen.spec.export == "<hidden>" and not seen.spec.script
    assert "s3cret" in str(job)  # the stored job is untouched


def test_config_auth_and_tls_keys() -> None:
    cfg = parse_config({"auth": {"type": "jwt", "jwt_key": "/k"}, "tls": {"dir": "/t"}})
    assert cfg.auth.type == "jwt" and cfg.tls.enabled and cfg.noded.listen == ""
    with pytest.raises(ConfigError, match=r"auth\.type"):
        parse_config({"auth": {"type": "kerberos"}})
    with pytest.raises(ConfigError, match=r"auth\.jwt_key"):
        parse_config({"auth": {"type": "jwt"}})
    with pytest.raises(ConfigError, match=r"controller\.private_data"):
        parse_config({"controller": {"private_data": ["everything"]}})


@pytest.mark.parametrize(
    ("spec", "what"),
    [
        (pb.JobSpec(argv=["x" * 1000] * 7000), "the script's arguments is too large: 7000000"),
        (pb.JobSpec(script="#!/bin/sh\n" + "x" * limits.MAX_SCRIPT_BYTES), "the batch script"),
        (
            pb.JobSpec(environment={f"V{i}": "x" * 1000 for i in range(1100)}),
            "the job environment is too large",
        ),
        (pb.JobSpec(environment={"BIG": "x" * (200 * 1024)}), "variable BIG"),
        (pb.JobSpec(name="n" * 5000), "JobSpec.name is too large: 5000 bytes, the limit is 4096"),
        (pb.JobSpec(partitions=["p"] * 20000), "JobSpec.partitions is too large: 20000 items"),
    ],
)
def test_size_limits_name_the_field_and_the_limit(spec: pb.JobSpec, what: str) -> None:
    with pytest.raises(TooLarge, match=what.replace("(", r"\(")):
        limits.check(pb.SubmitJobRequest(spec=spec))


def test_the_largest_accepted_job_fits_what_noded_receives() -> None:
    spec = pb.JobSpec(
        script="#!/bin/sh\n" + "x" * (limits.MAX_SCRIPT_BYTES - 20),
        environment={f"V{i:04d}": "y" * 1000 for i in range(1000)},
        argv=["z" * 1000] * 250,
        submit_line="s" * 60000,
    )
    limits.check(pb.SubmitJobRequest(spec=spec))  # accepted
    job = pb.Job(job_id=1, spec=spec, user="u" * 64)
    for i in range(64):
        job.allocations.add(node=f"node{i:04d}", cpus=128, gpu_indices=list(range(8)))
    launch = pb.LaunchJobRequest(job=job, environment=dict(spec.environment))
    assert launch.ByteSize() < limits.NODED_MAX_RECEIVE_BYTES


def test_client_limit_matches_the_servers() -> None:
    from corral import rest
    from corral.api import HttpController

    assert rest.MAX_REQUEST_BYTES == limits.MAX_REQUEST_BYTES
    with pytest.raises(TooLarge, match="at most 8388608 bytes"):
        HttpController(("127.0.0.1", 1), socket_path="").call("SubmitJob", {"x": "y" * (9 << 20)})


def test_corral_certs_makes_a_ca_and_one_certificate_per_daemon(tmp_path: pathlib.Path) -> None:
    from cryptography import x509

    from client.corral_cmd import main_args

    conf = tmp_path / "corral.toml"
    conf.write_text(
        'cluster_name = "lab"\n[controller]\nhost = "10.0.0.1"\n[[nodes]]\nnames = "gpu[01-02]"\n'
    )
    out = tmp_path / "tls"
    assert main_args(["certs", "-f", str(conf), "--dir", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        ["ca.crt", "ca.key"]
        + [f"{n}.{e}" for n in ("ctld", "gpu01", "gpu02") for e in ("crt", "key")]
    )
    assert oct((out / "gpu01.key").stat().st_mode & 0o777) == "0o600"
    cert = x509.load_pem_x509_certificate((out / "gpu02.crt").read_bytes())
    assert cert.subject.rfc4514_string() == "CN=gpu02"
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    assert cert.issuer == ca.subject
    ctld = x509.load_pem_x509_certificate((out / "ctld.crt").read_bytes())
    sans = ctld.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "ctld" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.1"]
    # revoking: the serial joins tls.dir/revoked, which a daemon re-reads when it changes
    from corral.auth import tls

    watch = tls.Revocations(str(out))
    gpu01, gpu02 = ((out / f"gpu0{i}.crt").read_bytes() for i in (1, 2))
    assert not watch.revoked(gpu01)
    assert main_args(["certs", "-f", str(conf), "--dir", str(out), "--revoke", "gpu01"]) == 0
    assert watch.revoked(gpu01) and not watch.revoked(gpu02)
    assert f"{cert.serial_number:x} gpu02" not in (out / "revoked").read_text()
    assert main_args(["certs", "-f", str(conf), "--dir", str(out), "--revoke", "gpu02"]) == 0
    assert watch.revoked(gpu01) and watch.revoked(gpu02)
    assert f"{cert.serial_number:x} gpu02" in (out / "revoked").read_text()


def test_corral_certs_again_keeps_what_is_valid_and_issues_what_is_asked(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from client.corral_cmd import main_args

    conf = tmp_path / "corral.toml"
    conf.write_text(
        'cluster_name = "lab"\n[controller]\nhost = "10.0.0.1"\n[[nodes]]\nnames = "gpu[01-02]"\n'
    )
    out = tmp_path / "tls"
    base = ["certs", "-f", str(conf), "--dir", str(out)]
    assert main_args(base) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    # a node added later: only its certificate is new; the running ctld's key stays
    assert main_args([*base, "--nodes", "gpu03"]) == 0
    printed = capsys.readouterr().out
    assert "ca.crt (CA), gpu03" in printed and "kept (valid" in printed and "ctld" in printed
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {n for n in after if after[n] != before.get(n)} == {"gpu03.crt", "gpu03.key"}
    # ctld asked for under another address: that one is issued again (it must name it)
    assert main_args([*base, "--nodes", "gpu03", "--controller-host", "10.0.0.9"]) == 0
    changed = {p.name for p in out.iterdir() if p.read_bytes() != after.get(p.name)}
    assert changed == {"ctld.crt", "ctld.key"}
    # --renew: everything asked anew, the CA kept
    now = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main_args([*base, "--renew"]) == 0
    changed = {p.name for p in out.iterdir() if p.read_bytes() != now.get(p.name)}
    assert changed == {f"{n}.{e}" for n in ("ctld", "gpu01", "gpu02") for e in ("crt", "key")}
    # a revoked one is issued anew
    assert main_args([*base, "--revoke", "gpu02"]) == 0
    capsys.readouterr()
    assert main_args([*base, "--nodes", "gpu02"]) == 0
    assert "ca.crt (CA), gpu02" in capsys.readouterr().out
    # a certificate of another CA (ca.crt made anew) is not kept
    for name in ("ca.crt", "ca.key"):
        (out / name).unlink()
    assert main_args([*base, "--nodes", "gpu01"]) == 0
    assert "ca.crt (CA), ctld, gpu01" in capsys.readouterr().out


def test_token_lifetimes() -> None:
    from client.credentials import parse_lifetime
    from corral.errors import InvalidOption

    assert parse_lifetime("7d") == 7 * 86400
    assert parse_lifetime("3600") == 3600
    assert parse_lifetime("2w") == 14 * 86400
    for bad in ("", "0", "-1d", "7 days", "400d"):
        with pytest.raises(InvalidOption):
            parse_lifetime(bad)
