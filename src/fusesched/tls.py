"""The cluster's own certificate authority: ``fusesched ca init`` and ``fusesched ca issue``.

``init_ca(D)`` writes ``D/ca.crt`` (the CA certificate, for clients' ``--ca``) and ``D/ca.key``
(mode 0600; keep it off the nodes). ``issue(D, "controller", ["ctl.example", "10.0.0.5"])``
writes ``D/controller.crt`` and ``D/controller.key`` (mode 0600), a server certificate for
those names and addresses, signed by the CA — what ``fusesched controller --tls-cert
--tls-key`` serves. Keys are ECDSA P-256; certificates are X.509 v3 with SANs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT = "ca.crt"
CA_KEY = "ca.key"


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def init_ca(folder: Path, name: str = "fusesched cluster CA", days: int = 3650) -> Path:
    """Create a CA in ``folder``; returns the CA certificate's path. Refuses to replace one."""
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / CA_CERT, folder / CA_KEY
    if cert_path.exists() or key_path.exists():
        raise FileExistsError(f"{folder} already holds a CA ({CA_CERT}/{CA_KEY})")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path


def issue(folder: Path, name: str, hosts: list[str], days: int = 825) -> tuple[Path, Path]:
    """A certificate for ``name`` valid for ``hosts`` (DNS names or IP addresses), signed by
    the CA in ``folder``; returns (certificate, key) paths."""
    if not hosts:
        raise ValueError("a certificate needs at least one host name or address")
    if not name or "/" in name or name.startswith(".") or name == "ca":
        raise ValueError(f"bad certificate name {name!r}")
    ca_key_pem = (folder / CA_KEY).read_bytes()
    ca_cert = x509.load_pem_x509_certificate((folder / CA_CERT).read_bytes())
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{folder / CA_KEY} is not an ECDSA key made by `fusesched ca init`")
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    _write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def client_context(ca: Path | str | None) -> ssl.SSLContext | None:
    """An SSL context that trusts ``ca`` (a PEM file), or ``None`` for the system's trust."""
    if ca is None:
        return None
    return ssl.create_default_context(cafile=str(ca))
