"""TLS for the admission webhooks: a private CA and a serving certificate it signs.

kube-apiserver only calls webhooks over HTTPS and checks the server against the
``caBundle`` of the webhook configuration. kopf can self-sign, but through oscrypto,
which fails on Debian bookworm's OpenSSL 3; so we generate the pair with ``cryptography``.

Locally the names are ``127.0.0.1``/``localhost``; in a cluster they are the operator
Service's DNS names (``<svc>.<ns>.svc`` ...), or the certificate is mounted instead.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True, kw_only=True)
class CertificateFiles:
    ca: Path
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def generate_pem(*, names: list[str], days: int = 365) -> tuple[bytes, bytes, bytes]:
    """Return (CA certificate, serving certificate, serving key) as PEM for ``names``."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("rollouts-webhook-ca"))
        .issuer_name(_name("rollouts-webhook-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
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
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(_san(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return (
        ca_cert.public_bytes(serialization.Encoding.PEM),
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def write_certificates(directory: Path, *, names: list[str], days: int = 365) -> CertificateFiles:
    """Generate a fresh CA and serving pair into ``directory`` (key readable by the owner only)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, cert, key = generate_pem(names=names, days=days)
    files = CertificateFiles(ca=directory / "ca.crt", cert=directory / "tls.crt", key=directory / "tls.key")
    files.ca.write_bytes(ca)
    files.cert.write_bytes(cert)
    files.key.touch(mode=0o600)
    files.key.write_bytes(key)
    return files


def mounted_certificates(directory: Path) -> CertificateFiles:
    """Certificates mounted from a Secret (in-cluster mode): ``ca.crt``, ``tls.crt``, ``tls.key``."""
    files = CertificateFiles(ca=directory / "ca.crt", cert=directory / "tls.crt", key=directory / "tls.key")
    missing = [str(p) for p in (files.ca, files.cert, files.key) if not p.exists()]
    if missing:
        raise FileNotFoundError(f"webhook certificate files missing: {', '.join(missing)}")
    return files
