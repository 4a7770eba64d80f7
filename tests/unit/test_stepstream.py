"""The task stream's framing and proof (corral/stepstream.py)."""

from __future__ import annotations

import hmac
import os

import pytest

from corral import stepstream as ss


@pytest.mark.parametrize("key_len", [0, 1, 32, 63, 64, 65, 200])
def test_the_proof_is_hmac_sha256(key_len: int) -> None:
    key, msg = os.urandom(key_len), os.urandom(1000)
    assert ss.hmac_sha256(key, msg) == hmac.digest(key, msg, "sha256")


def test_the_proof_binds_credential_nonce_and_body() -> None:
    base = ss.proof("cred", b"n" * 32, b"{}")
    assert ss.proof("cred", b"n" * 32, b"{}") == base
    assert ss.proof("cred2", b"n" * 32, b"{}") != base
    assert ss.proof("cred", b"m" * 32, b"{}") != base
    assert ss.proof("cred", b"n" * 32, b"{ }") != base


def test_frames_and_addresses() -> None:
    frame = ss.frame(ss.SIGNAL, ss.SIGNAL_FIELD.pack(15))
    length, kind = ss.HEADER.unpack_from(frame)
    assert (length, kind) == (5, ss.SIGNAL) and len(frame) == 4 + length
    assert ss.split_address("127.0.0.2:6922") == ("127.0.0.2", 6922, False)
    assert ss.split_address("tls://[::1]:6922") == ("::1", 6922, True)
    with pytest.raises(ValueError, match="not a task stream address"):
        ss.split_address("node01")
