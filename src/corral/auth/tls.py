"""The cluster CA and the daemons' certificates (``corral certs``), and gRPC credentials.

One CA per cluster signs one certificate per daemon: ``ctld`` for the controller and
one per node, its common name and DNS name the node's name. A node's certificate is
what proves which node calls: ctld binds a NodeController call to the node its
certificate names, and noded accepts NodeAgent calls only from ``ctld``. Addresses are
not names: peers check the name with a target-name override, so an IP works.

Files in one directory: ``ca.crt``, ``ca.key`` (keep it on the admin host),
``ctld.crt``/``ctld.key``, ``<node>.crt``/``<node>.key``; keys are owner-only.
``revoked`` lists the serial numbers of certificates no daemon accepts any more
(``corral certs --revoke NAME``); each daemon re-reads it when it changes.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from typing import Any

from corral.auth import CONTROLLER_CN
from corral.errors import ConfigError

VALID_DAYS = 3650
REVOKED_FILE = "revoked"


def _write(path: str, data: bytes, mode: int) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _new_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _cert_pem(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def create_ca(directory: str, cluster: str) -> None:
    """A new CA in ``directory`` (kept if one is already there)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    os.makedirs(directory, mode=0o755, exist_ok=True)
    if os.path.exists(os.path.join(directory, "ca.crt")):
        return
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"corral CA {cluster}")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write(os.path.join(directory, "ca.key"), _key_pem(key), 0o600)
    _write(os.path.join(directory, "ca.crt"), _cert_pem(cert), 0o644)


def issue(directory: str, name: str, hosts: Iterable[str] = ()) -> None:
    """A certificate for daemon ``name`` signed by the CA in ``directory``."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not name or "/" in name or name.startswith(".") or name == "ca":
        raise ConfigError(f"{name!r} is not a daemon name for a certificate")
    with open(os.path.join(directory, "ca.key"), "rb") as fh:
        ca_key: Any = serialization.load_pem_private_key(fh.read(), None)
    with open(os.path.join(directory, "ca.crt"), "rb") as fh:
        ca_cert = x509.load_pem_x509_certificate(fh.read())
    sans: list[x509.GeneralName] = [x509.DNSName(name)]
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            if host != name:
                sans.append(x509.DNSName(host))
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(os.path.join(directory, f"{name}.key"), _key_pem(key), 0o600)
    _write(os.path.join(directory, f"{name}.crt"), _cert_pem(cert), 0o644)


def create_cluster_certs(
    directory: str,
    cluster: str,
    nodes: Iterable[str],
    controller_hosts: Iterable[str] = (),
    *,
    renew: bool = False,
) -> tuple[list[str], list[str]]:
    """CA (if missing), ctld's certificate and one per node: (issued, kept). A daemon's
    certificate that is there, from this CA, and names every host asked for is kept
    unless ``renew``: adding a node must not replace the running ctld's key."""
    create_ca(directory, cluster)
    issued, kept = [], []
    wanted = [(CONTROLLER_CN, list(controller_hosts))] + [(n, []) for n in nodes]
    for name, hosts in wanted:
        if not renew and _covers(directory, name, hosts):
            kept.append(name)
        else:
            issue(directory, name, hosts)
            issued.append(name)
    return issued, kept


def _covers(directory: str, name: str, hosts: Iterable[str]) -> bool:
    """``name``'s certificate and key are there, signed by this CA, not revoked, valid
    for another 30 days, with ``name`` and every one of ``hosts`` among its names."""
    import ipaddress

    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    try:
        pem = _read(directory, f"{name}.crt")
        if Revocations(directory).revoked(pem):
            return False
        cert = x509.load_pem_x509_certificate(pem)
        ca = x509.load_pem_x509_certificate(_read(directory, "ca.crt"))
        if not os.path.exists(os.path.join(directory, f"{name}.key")):
            return False
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        cert.verify_directly_issued_by(ca)  # a CA made anew since: issue again
    except (ConfigError, ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return False
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=30)
    if cert.not_valid_after_utc < soon:
        return False
    names = set(sans.get_values_for_type(x509.DNSName))
    addresses = {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    for host in [name, *hosts]:
        try:
            if str(ipaddress.ip_address(host)) not in addresses:
                return False
        except ValueError:
            if host not in names:
                return False
    return True


def serial_of(pem: bytes) -> int:
    from cryptography import x509

    return int(x509.load_pem_x509_certificate(pem).serial_number)


def revoke(directory: str, names: Iterable[str]) -> list[int]:
    """Add the certificates ``NAME.crt`` of ``directory`` to its ``revoked`` list."""
    serials = []
    lines = []
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for name in names:
        serial = serial_of(_read(directory, f"{name}.crt"))
        serials.append(serial)
        lines.append(f"{serial:x} {name} {now}\n")
    path = os.path.join(directory, REVOKED_FILE)
    try:
        with open(path) as fh:
            kept = fh.read()
    except FileNotFoundError:
        kept = ""
    _write(path, (kept + "".join(lines)).encode(), 0o644)
    return serials


class Revocations:
    """The serials in ``revoked``, re-read whenever the file changes (a stat per look),
    and the serial of each certificate seen (parsed once)."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, REVOKED_FILE)
        self.stamp: tuple[int, int] | None = None
        self.serials: frozenset[int] = frozenset()
        self._seen: dict[bytes, int] = {}

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.stamp, self.serials = None, frozenset()
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self.stamp:
            return
        serials = set()
        with open(self.path) as fh:
            for line in fh:
                word = line.split("#", 1)[0].split()
                if word:
                    try:
                        serials.add(int(word[0], 16))
                    except ValueError:
                        continue  # not a serial: ignored, never fatal
        self.stamp, self.serials = stamp, frozenset(serials)

    def revoked(self, pem: bytes) -> bool:
        self._refresh()
        if not self.serials:
            return False
        serial = self._seen.get(pem)
        if serial is None:
            serial = serial_of(pem)
            if len(self._seen) > 4096:
                self._seen.clear()
            self._seen[pem] = serial
        return serial in self.serials


_revocations: Revocations | None = None


def watch_revocations(directory: str) -> None:
    """This daemon honours ``directory``'s ``revoked`` list in every peer_name()."""
    global _revocations
    _revocations = Revocations(directory) if directory else None


# ---------------------------------------------------------------- gRPC


def _read(directory: str, name: str) -> bytes:
    path = os.path.join(directory, name)
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror}); run `corral certs`") from None


def server_credentials(directory: str, name: str) -> Any:
    """Mutual TLS: only peers with a certificate from the cluster CA get in."""
    import grpc

    return grpc.ssl_server_credentials(
        [(_read(directory, f"{name}.key"), _read(directory, f"{name}.crt"))],
        root_certificates=_read(directory, "ca.crt"),
        require_client_auth=True,
    )


def step_server_credentials(directory: str, name: str) -> Any:
    """noded's step port (gRPC RunTasks for clients without a certificate): TLS with
    this node's certificate, server side only. No client certificate is asked for, so
    none is ever seen there: LaunchJob and SignalJob, which need ctld's, are refused."""
    import grpc

    return grpc.ssl_server_credentials(
        [(_read(directory, f"{name}.key"), _read(directory, f"{name}.crt"))],
        root_certificates=None,
        require_client_auth=False,
    )


def stream_server_context(directory: str, name: str) -> Any:
    """srun's task stream (server side only: srun has no certificate; it proves the
    step's credential instead): this node's certificate from the cluster CA."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(
        os.path.join(directory, f"{name}.crt"), os.path.join(directory, f"{name}.key")
    )
    return ctx


def channel_credentials(directory: str, name: str) -> Any:
    import grpc

    return grpc.ssl_channel_credentials(
        _read(directory, "ca.crt"),
        _read(directory, f"{name}.key"),
        _read(directory, f"{name}.crt"),
    )


def channel_options(peer: str) -> list[tuple[str, Any]]:
    """Check the peer's certificate for ``peer``'s name, whatever address we dial."""
    return [("grpc.ssl_target_name_override", peer)]


def peer_name(context: Any) -> str:
    """The common name in the caller's verified certificate; "" without one, or when
    the certificate is revoked (``watch_revocations``)."""
    auth = context.auth_context() or {}
    names = auth.get("x509_common_name") or []
    if not names:
        return ""
    if _revocations is not None:
        pems = auth.get("x509_pem_cert") or []
        if not pems or _revocations.revoked(pems[0]):
            return ""
    return str(names[0].decode())
