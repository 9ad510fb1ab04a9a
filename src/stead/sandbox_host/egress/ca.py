"""The installation's egress CA: the certificate authority every sandbox trusts, so
that its egress proxy can answer TLS for the hosts it forwards to (DESIGN rule 8).

The CA is made once, in the host's state directory (root only, outside every
sandbox), key mode 0600, and reused across host restarts: a sandbox that slept
keeps trusting the proxy that wakes it. Leaf certificates are made on demand,
one per host name, signed by the CA and kept in memory only (a bounded cache
per ``CertificateAuthority``); their key pairs never touch a disk.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections import OrderedDict
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
CA_YEARS = 10
LEAF_DAYS = 30
LEAF_RENEW = datetime.timedelta(days=1)
"""A cached leaf older than this is made again, long before it expires."""
LEAF_CACHE = 1024
"""Default bound on the leaf contexts one proxy host keeps."""
_BACKDATE = datetime.timedelta(hours=1)  # tolerates a sandbox clock slightly behind


class CertificateAuthority:
    """Signs leaf certificates for host names; ``server_context(host)`` is a TLS
    server context (ALPN ``http/1.1`` only) presenting the leaf for ``host``."""

    def __init__(
        self,
        certificate: x509.Certificate,
        key: ec.EllipticCurvePrivateKey,
        *,
        cache_size: int = LEAF_CACHE,
    ) -> None:
        self.certificate = certificate
        self._key = key
        # One key pair signs every leaf this process makes: making a key per host
        # would cost more than the certificate, and it never leaves memory.
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key_pem = self._leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self._cache: OrderedDict[str, tuple[datetime.datetime, ssl.SSLContext]] = OrderedDict()
        self._cache_size = cache_size

    def __repr__(self) -> str:
        return f"CertificateAuthority({self.certificate.subject.rfc4514_string()!r})"

    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @classmethod
    def load_or_create(cls, directory: Path) -> CertificateAuthority:
        """The CA kept in ``directory`` (made, 0700, if missing); a new one is made
        and saved when either file is missing."""
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        cert_path, key_path = directory / CA_CERT, directory / CA_KEY
        if cert_path.is_file() and key_path.is_file():
            os.chmod(key_path, 0o600)
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{key_path}: not an EC private key")
            return cls(x509.load_pem_x509_certificate(cert_path.read_bytes()), key)
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = _ca_certificate(key)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        _write_atomically(key_path, key_pem, 0o600)
        _write_atomically(cert_path, certificate.public_bytes(serialization.Encoding.PEM), 0o644)
        return cls(certificate, key)

    def server_context(self, host: str) -> ssl.SSLContext:
        """A server context for ``host`` (a name or an IP address), from the cache
        when a recent one is there."""
        now = datetime.datetime.now(datetime.UTC)
        found = self._cache.get(host)
        if found is not None and now - found[0] < LEAF_RENEW:
            self._cache.move_to_end(host)
            return found[1]
        context = self._make_context(host, now)
        self._cache[host] = (now, context)
        self._cache.move_to_end(host)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return context

    def leaf_pem(self, host: str, now: datetime.datetime) -> bytes:
        """A leaf certificate for ``host``, PEM-encoded."""
        try:
            names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(host))]
        except ValueError:
            names = [x509.DNSName(host)]
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])])
        public = self._leaf_key.public_key()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.certificate.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(_key_usage(signing=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        return certificate.public_bytes(serialization.Encoding.PEM)

    def _make_context(self, host: str, now: datetime.datetime) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        # ``load_cert_chain`` reads only from a path: an anonymous memory file
        # keeps the leaf's key off every disk.
        fd = os.memfd_create("stead-egress-leaf", os.MFD_CLOEXEC)
        try:
            os.write(fd, self.leaf_pem(host, now) + self._leaf_key_pem)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return context


def _ca_certificate(key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    tag = os.urandom(4).hex()  # two installations' CAs never share a name
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "stead"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"stead egress CA {tag}"),
        ]
    )
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=365 * CA_YEARS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signing=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )


def _key_usage(*, signing: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not signing,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signing,
        crl_sign=signing,
        encipher_only=False,
        decipher_only=False,
    )


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(partial, mode)
    partial.rename(path)
