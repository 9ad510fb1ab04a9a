"""TLS of the host protocol over TCP, keyed by the shared token.

A brain on another machine sends a host the token and, through the secrets
operation, the credentials its sandboxes' egress proxies inject: over plain
TCP both crossed the network readable by anyone on the path. Every TCP
connection is TLS 1.3 now, with nothing more to set up than the token.

The token is the trust root: both sides derive the same signing key from it
(scrypt, so a captured handshake is slow to guess a token from), and from that
key one certificate authority. A host signs a certificate of its own with it
at each start, a fresh key that never touches the disk; a brain trusts that
authority alone. A party without the token can neither pose as a host nor read
the traffic; the brain still proves itself to the host with the token in its
hello, now inside TLS. Host names are not checked: the token, not a name, says
who may be a host (as it always said who may be a brain).
"""

from __future__ import annotations

import datetime
import os
import secrets
import ssl
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_SALT = b"stead sandbox host protocol"
_AUTHORITY = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stead sandbox hosts")])
_HOST = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stead sandbox host")])
_HOST_CERTIFICATE_DAYS = 3650
"""A host makes its certificate at each start; a host that runs longer than
this must be restarted to be reached again."""


@dataclass(frozen=True, slots=True)
class Authority:
    """The token's certificate authority: its key, and its certificate in PEM."""

    key: Ed25519PrivateKey
    certificate_pem: str

    def __repr__(self) -> str:
        return "Authority(...)"


def token_authority(token: str) -> Authority:
    """The same on every machine for the same token. Costs a scrypt (tens of
    milliseconds, 16 MiB): call it once per token, off the event loop."""
    seed = Scrypt(salt=_SALT, length=32, n=2**14, r=8, p=1).derive(token.encode())
    key = Ed25519PrivateKey.from_private_bytes(seed)
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_AUTHORITY)
        .issuer_name(_AUTHORITY)
        .public_key(public)
        .serial_number(1)
        .not_valid_before(datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC))
        .not_valid_after(datetime.datetime(9999, 12, 31, tzinfo=datetime.UTC))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_signing_only(), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, None)
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    return Authority(key, pem)


def client_context(authority: Authority) -> ssl.SSLContext:
    """What a brain dials a host with: TLS 1.3, the host's certificate signed
    by ``authority``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.check_hostname = False  # the token, not a name, makes a host
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=authority.certificate_pem)
    return context


def server_context(authority: Authority) -> ssl.SSLContext:
    """What a host answers with: a certificate made now, for a key made now,
    loaded through a memory file so the key never reaches the disk."""
    key = Ed25519PrivateKey.generate()
    now = datetime.datetime.now(datetime.UTC)
    authority_public = authority.key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_HOST)
        .issuer_name(_AUTHORITY)
        .public_key(key.public_key())
        .serial_number(int.from_bytes(secrets.token_bytes(16)) >> 1)
        .not_valid_before(now - datetime.timedelta(days=1))  # clocks that disagree a little
        .not_valid_after(now + datetime.timedelta(days=_HOST_CERTIFICATE_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority_public), critical=False
        )
        .sign(authority.key, None)
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.num_tickets = 0  # a brain keeps its connections; it resumes none
    fd = os.memfd_create("stead-host-tls", os.MFD_CLOEXEC)
    try:
        os.write(fd, pem)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    return context


def _signing_only() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
