"""The task stream's framing and proof (corral/stepstream.py)."""

from __future__ import annotations

import hashlib
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


def _pair(key: bytes = b"k" * 32) -> tuple[ss.FrameMac, ss.FrameMac]:
    return ss.FrameMac(key), ss.FrameMac(key, hashlib.sha256)


def _payload(frame: bytes) -> tuple[int, bytearray]:
    length, kind = ss.HEADER.unpack_from(frame)
    assert len(frame) == 4 + length
    return kind, bytearray(frame[ss.HEADER.size :])


def test_frame_tags_are_hmac_sha256_over_sequence_kind_and_payload() -> None:
    sender, receiver = _pair()
    for n, data in enumerate((b"", b"hello", os.urandom(5000))):
        frame = sender.seal(ss.STDOUT, ss.RANK.pack(3), data)
        kind, payload = _payload(frame)
        mac = hmac.digest(b"k" * 32, ss.SEQ_KIND.pack(n, kind) + payload[:-16], "sha256")
        assert payload[-16:] == mac[:16]
        receiver.open(kind, payload)
        assert payload == ss.RANK.pack(3) + data


@pytest.mark.parametrize("attack", ["changed", "untagged", "replayed", "reordered", "kind"])
def test_a_frame_that_was_tampered_with_fails_its_tag(attack: str) -> None:
    sender, receiver = _pair()
    first = sender.seal(ss.STDIN, b"one")
    second = sender.seal(ss.STDIN, b"two")
    receiver.open(*_payload(first))
    kind, payload = _payload(second)
    if attack == "changed":
        payload[0] ^= 1
    elif attack == "untagged":
        kind, payload = _payload(ss.frame(ss.STDIN, b"two"))
    elif attack == "replayed":
        kind, payload = _payload(first)
    elif attack == "reordered":  # a third frame where the second belongs
        kind, payload = _payload(sender.seal(ss.STDIN, b"three"))
    else:
        kind = ss.SIGNAL
    with pytest.raises(ss.TamperedError):
        receiver.open(kind, payload)


def test_keys_differ_by_direction_nonce_and_credential() -> None:
    up, down = ss.session_keys("cred", b"n" * 32)
    assert up != down
    assert ss.session_keys("cred", b"m" * 32)[0] != up
    assert ss.session_keys("cred2", b"n" * 32)[0] != up


def test_the_built_in_and_openssl_hashes_agree_across_the_switch() -> None:
    """srun moves to OpenSSL's SHA-256 after FAST_AFTER bytes; the tags do not change."""
    slow, fast = _pair()
    assert not slow.fast and fast.fast
    chunk = b"x" * (256 * 1024)
    for _ in range(2 * ss.FrameMac.FAST_AFTER // len(chunk)):
        kind, payload = _payload(fast.seal(ss.STDOUT, chunk))
        slow.open(kind, payload)
    assert slow.fast
