"""A small certificate authority for federations without their own (``fedclust pki``).

``init_ca`` writes a self-signed CA (``ca.pem``, ``ca-key.pem``); ``issue`` signs a
certificate for one service or organisation (``NAME.pem``, ``NAME-key.pem``) usable both to
serve HTTPS and as a TLS client certificate (extended key usages serverAuth and clientAuth).
Its subject common name and first DNS name are NAME. Under mutual TLS a token counts only with
a certificate naming its holder (:mod:`infra.tls`): issue a participant's under its
participant id, an analyst's or admin's under the name configured with its token, and the
coordinator's as ``coordinator`` (the counting service's default ``[tls] coordinator_name``).
``export_p12`` bundles an issued certificate, its key and the CA certificate into
``NAME.p12`` (PKCS#12, encrypted with a passphrase), the form a browser imports a client
certificate in (the dashboard under mutual TLS).

Keys are ECDSA P-256, written unencrypted with mode 0600 (a ``.p12`` encrypted, also 0600);
files are never overwritten.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedclust.core.validation import IDENTIFIER_TEXT, is_identifier

__all__ = [
    "CA_DAYS", "ISSUE_DAYS", "MIN_P12_PASSPHRASE", "IssuedFiles", "check_p12_passphrase",
    "export_p12", "init_ca", "issue",
]

CA_DAYS: Final = 3650
ISSUE_DAYS: Final = 825
_BACKDATE: Final = dt.timedelta(minutes=5)  # tolerate clocks a little behind
#: The shortest passphrase a ``.p12`` is encrypted with.
MIN_P12_PASSPHRASE: Final = 8


@dataclass(frozen=True)
class IssuedFiles:
    """A certificate and its private key, as written."""

    certificate: Path
    key: Path


def init_ca(
    out: str | os.PathLike[str], *, name: str = "fedclust federation CA", days: int = CA_DAYS
) -> IssuedFiles:
    """Create a CA in ``out``: ``ca.pem`` and ``ca-key.pem`` (mode 0600).

    Raises:
        FileExistsError: ``out`` already holds either file.
        ValueError: ``days`` < 1 or an empty ``name``.
    """
    if not name.strip():
        raise ValueError("the CA's name must not be empty.")
    folder = _folder(out)
    files = IssuedFiles(folder / "ca.pem", folder / "ca-key.pem")
    _refuse_existing(files.certificate, files.key)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    start, end = _validity(days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    _write(files, cert, key)
    return files


def issue(
    name: str,
    ca: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
    days: int = ISSUE_DAYS,
) -> IssuedFiles:
    """Sign a certificate for ``name`` with the CA in folder ``ca``; write it to ``out``.

    The certificate's common name and first SAN DNS name are ``name``; ``dns`` and ``ips``
    add further SAN entries (e.g. ``localhost`` and ``127.0.0.1`` for a loopback server).

    Raises:
        FileExistsError: ``out`` already holds ``NAME.pem`` or ``NAME-key.pem``.
        ValueError: a bad name, IP address or ``days``, or no readable CA in ``ca``.
    """
    if not is_identifier(name):
        raise ValueError(
            f"certificate name {name!r} must be {IDENTIFIER_TEXT} (a participant id or a host "
            "name)."
        )
    try:
        addresses = [ipaddress.ip_address(ip) for ip in ips]
    except ValueError as exc:
        raise ValueError(f"--ip: {exc}") from None
    ca_cert, ca_key = _load_ca(Path(ca))
    folder = _folder(out)
    files = IssuedFiles(folder / f"{name}.pem", folder / f"{name}-key.pem")
    _refuse_existing(files.certificate, files.key)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys([name, *dns])]
    names += [x509.IPAddress(a) for a in addresses]
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    start, end = _validity(days)
    end = min(end, ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(files, cert, key)
    return files


def export_p12(
    name: str,
    ca: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    passphrase: bytes,
) -> Path:
    """Write ``NAME.p12`` in ``folder`` from its ``NAME.pem`` and ``NAME-key.pem`` (as
    :func:`issue` wrote them) and the CA certificate ``ca/ca.pem``, encrypted with
    ``passphrase`` (PBES2: AES-256-CBC, PBKDF2 and a MAC with SHA-256); return its path.

    Raises:
        FileExistsError: ``NAME.p12`` exists already.
        ValueError: a passphrase shorter than :data:`MIN_P12_PASSPHRASE` characters, or no
            readable certificate and matching key, or CA certificate.
    """
    check_p12_passphrase(passphrase)
    where = Path(folder)
    cert, key = _load_pair(
        where / f"{name}.pem", where / f"{name}-key.pem", flag=f"--out {where}",
        hint=f"issue them with `fedclust pki issue {name}`.",
    )
    try:
        ca_cert = x509.load_pem_x509_certificate((Path(ca) / "ca.pem").read_bytes())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--ca {ca}: no readable ca.pem ({type(exc).__name__}).") from None
    path = where / f"{name}.p12"
    _refuse_existing(path)
    encryption = (
        serialization.PrivateFormat.PKCS12.encryption_builder()
        .key_cert_algorithm(pkcs12.PBES.PBESv2SHA256AndAES256CBC)
        .hmac_hash(hashes.SHA256())
        .build(passphrase)
    )
    _write_private(
        path,
        pkcs12.serialize_key_and_certificates(name.encode(), key, cert, [ca_cert], encryption),
    )
    return path


def check_p12_passphrase(passphrase: bytes) -> None:
    """ValueError unless ``passphrase`` has at least :data:`MIN_P12_PASSPHRASE` characters."""
    if len(passphrase) < MIN_P12_PASSPHRASE:
        raise ValueError(
            f"the .p12 passphrase must have at least {MIN_P12_PASSPHRASE} characters."
        )


def _validity(days: int) -> tuple[dt.datetime, dt.datetime]:
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ValueError(f"--days must be a whole number >= 1; got {days!r}.")
    now = dt.datetime.now(dt.UTC)
    return now - _BACKDATE, now + dt.timedelta(days=days)


def _folder(out: str | os.PathLike[str]) -> Path:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _refuse_existing(*paths: Path) -> None:
    for path in paths:
        if path.exists():
            raise FileExistsError(
                f"{path} already exists; remove it or write to another --out folder."
            )


def _load_ca(folder: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    return _load_pair(
        folder / "ca.pem", folder / "ca-key.pem", flag=f"--ca {folder}",
        hint="create them with `fedclust pki init-ca`.",
    )


def _load_pair(
    cert_path: Path, key_path: Path, *, flag: str, hint: str
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate and its private key; ValueError naming ``flag`` (and ``hint``) when
    either is unreadable or the key is not the certificate's."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(
            f"{flag}: no readable {cert_path.name} and {key_path.name} ({type(exc).__name__}); "
            f"{hint}"
        ) from None
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or (
        key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki)
    ):
        raise ValueError(f"{flag}: {key_path.name} is not the key of {cert_path.name}.")
    return cert, key


def _write(files: IssuedFiles, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    """The key first, created 0600 (never readable by others), then the certificate."""
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_private(files.key, pem_key)
    files.certificate.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _write_private(path: Path, data: bytes) -> None:
    """A new file of mode 0600 (never readable by others, whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600)
