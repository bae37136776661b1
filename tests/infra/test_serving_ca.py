"""``infra.tls.serving_ca``: the root CA of the chain a service serves, found issuer by
issuer through the certificates of ``certificate``, ``ca`` and ``client_ca``."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from fedclust.infra.tls import TlsSettings, serving_ca

trustme = pytest.importorskip("trustme")


def _write(tmp_path: Path, name: str, pems: list[bytes]) -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join(pems))
    return path


@pytest.fixture
def chain(tmp_path: Path) -> tuple[Path, Path, x509.Certificate, Path]:
    """A leaf issued by an intermediate CA issued by a root: the certificate file (leaf then
    intermediate), its key, the root certificate and its file."""
    root = trustme.CA()
    leaf = root.create_child_ca().issue_cert("coordinator.example")
    served = _write(tmp_path, "chain.pem", [blob.bytes() for blob in leaf.cert_chain_pems])
    key = _write(tmp_path, "key.pem", [leaf.private_key_pem.bytes()])
    root_path = _write(tmp_path, "root.pem", [root.cert_pem.bytes()])
    return served, key, x509.load_pem_x509_certificate(root.cert_pem.bytes()), root_path


def test_the_root_is_found_through_an_intermediate_in_ca_or_client_ca(
    chain: tuple[Path, Path, x509.Certificate, Path],
) -> None:
    served, key, root, root_path = chain
    assert len(x509.load_pem_x509_certificates(served.read_bytes())) == 2  # leaf, intermediate
    assert serving_ca(TlsSettings(certificate=served, key=key, ca=root_path)) == root
    assert serving_ca(TlsSettings(certificate=served, key=key, client_ca=root_path)) == root


def test_a_chain_to_a_root_no_file_holds_gives_none(
    chain: tuple[Path, Path, x509.Certificate, Path], tmp_path: Path,
) -> None:
    served, key, _, _ = chain
    assert serving_ca(TlsSettings(certificate=served, key=key)) is None
    other = _write(tmp_path, "other.pem", [trustme.CA().cert_pem.bytes()])
    assert serving_ca(TlsSettings(certificate=served, key=key, ca=other)) is None


def test_a_self_signed_leaf_is_no_ca_and_plain_http_has_none(tmp_path: Path) -> None:
    alone = trustme.CA()
    cert = _write(tmp_path, "self.pem", [alone.cert_pem.bytes()])
    key = _write(tmp_path, "self.key", [alone.private_key_pem.bytes()])
    assert serving_ca(TlsSettings(certificate=cert, key=key, ca=cert)) is None
    assert serving_ca(TlsSettings()) is None
