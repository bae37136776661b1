"""The federation CA of ``fedclust pki``: files, modes, and certificates that verify."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
    pkcs12,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store

from fedclust import pki
from fedclust.cli import main


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_cli_writes_a_ca_and_a_server_certificate_that_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca_dir, out = tmp_path / "ca", tmp_path / "certs"
    assert main(["pki", "init-ca", "--out", str(ca_dir)]) == 0
    assert main([
        "pki", "issue", "coordinator", "--ca", str(ca_dir), "--out", str(out),
        "--dns", "localhost", "--ip", "127.0.0.1", "--days", "30",
    ]) == 0
    assert "coordinator-key.pem" in capsys.readouterr().out
    written = sorted(p.name for p in [*ca_dir.iterdir(), *out.iterdir()])
    assert written == ["ca-key.pem", "ca.pem", "coordinator-key.pem", "coordinator.pem"]
    for key in (ca_dir / "ca-key.pem", out / "coordinator-key.pem"):
        assert _mode(key) == 0o600
        load_pem_private_key(key.read_bytes(), password=None)
    ca, leaf = _cert(ca_dir / "ca.pem"), _cert(out / "coordinator.pem")
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(
        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
    )
    chain = verifier.verify(leaf, [])
    assert chain[-1] == ca
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["coordinator", "localhost"]
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    assert 30 <= lifetime.days <= 31


def test_a_participant_certificate_names_the_participant_and_verifies_as_a_client(
    tmp_path: Path,
) -> None:
    ca = pki.init_ca(tmp_path)
    files = pki.issue("hospital-a", tmp_path, tmp_path / "out")
    leaf = _cert(files.certificate)
    common_names = leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert [a.value for a in common_names] == ["hospital-a"]
    verifier = PolicyBuilder().store(Store([_cert(ca.certificate)])).build_client_verifier()
    assert verifier.verify(leaf, []).subjects == [x509.DNSName("hospital-a")]


def test_a_certificate_of_another_ca_does_not_verify(tmp_path: Path) -> None:
    pki.init_ca(tmp_path / "a")
    other = pki.init_ca(tmp_path / "b")
    leaf = _cert(pki.issue("hospital-a", tmp_path / "a", tmp_path / "out").certificate)
    verifier = PolicyBuilder().store(Store([_cert(other.certificate)])).build_client_verifier()
    with pytest.raises(x509.verification.VerificationError):
        verifier.verify(leaf, [])


def test_existing_files_are_never_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pki.init_ca(tmp_path)
    before = (tmp_path / "ca-key.pem").read_bytes()
    assert main(["pki", "init-ca", "--out", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "ca-key.pem").read_bytes() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["hospital a"], "must be 1-64 characters"),
        (["hospital-a", "--ip", "localhost"], "--ip"),
        (["hospital-a", "--days", "0"], "--days"),
    ],
)
def test_bad_issue_arguments_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    pki.init_ca(tmp_path)
    assert main(["pki", "issue", *args, "--ca", str(tmp_path), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca-key.pem", "ca.pem"]


def test_issue_without_a_ca_names_the_command_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fedclust pki init-ca"):
        pki.issue("hospital-a", tmp_path / "none", tmp_path)


def test_issue_with_p12_writes_an_encrypted_bundle_a_browser_imports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca_dir, out = tmp_path / "ca", tmp_path / "certs"
    secret = tmp_path / "passphrase.txt"
    secret.write_text("correct horse battery\n", encoding="utf-8")
    assert main(["pki", "init-ca", "--out", str(ca_dir)]) == 0
    assert main([
        "pki", "issue", "analyst", "--ca", str(ca_dir), "--out", str(out), "--p12",
        "--p12-passphrase-file", str(secret),
    ]) == 0
    bundle = out / "analyst.p12"
    assert str(bundle) in capsys.readouterr().out
    assert _mode(bundle) == 0o600
    loaded = pkcs12.load_pkcs12(bundle.read_bytes(), b"correct horse battery")
    assert loaded.cert is not None and loaded.key is not None
    assert loaded.cert.certificate == _cert(out / "analyst.pem")
    assert loaded.cert.friendly_name == b"analyst"
    spki = (Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    assert loaded.key.public_key().public_bytes(*spki) == (
        loaded.cert.certificate.public_key().public_bytes(*spki)
    )
    assert [c.certificate for c in loaded.additional_certs] == [_cert(ca_dir / "ca.pem")]
    with pytest.raises(ValueError):
        pkcs12.load_pkcs12(bundle.read_bytes(), b"wrong passphrase")


def test_export_p12_bundles_an_issued_certificate_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pki.init_ca(tmp_path)
    pki.issue("analyst", tmp_path, tmp_path / "out")
    secret = tmp_path / "passphrase.txt"
    secret.write_text("eight chars ok", encoding="utf-8")
    args = ["pki", "export-p12", "analyst", "--ca", str(tmp_path), "--out",
            str(tmp_path / "out"), "--p12-passphrase-file", str(secret)]
    assert main(args) == 0
    loaded = pkcs12.load_pkcs12((tmp_path / "out" / "analyst.p12").read_bytes(), b"eight chars ok")
    assert loaded.cert is not None
    assert loaded.cert.certificate == _cert(tmp_path / "out" / "analyst.pem")
    capsys.readouterr()
    assert main(args) == 2  # never overwritten
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--p12"], "at least 8 characters"),  # the passphrase file holds "short"
        (["--p12-passphrase-file"], "is for --p12"),
    ],
)
def test_a_bad_p12_request_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    pki.init_ca(tmp_path)
    secret = tmp_path / "passphrase.txt"
    secret.write_text("short\n", encoding="utf-8")
    flags = [*args, str(secret)] if args == ["--p12-passphrase-file"] else [
        *args, "--p12-passphrase-file", str(secret)]
    out = tmp_path / "out"
    assert main(["pki", "issue", "analyst", "--ca", str(tmp_path), "--out", str(out),
                 *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == []


def test_export_p12_without_the_certificate_names_the_command(tmp_path: Path) -> None:
    pki.init_ca(tmp_path)
    with pytest.raises(ValueError, match="fedclust pki issue analyst"):
        pki.export_p12("analyst", tmp_path, tmp_path / "none", b"long enough")
