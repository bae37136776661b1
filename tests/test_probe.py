"""``python -m fedclust.probe``: a service's own readiness over plain HTTP and mutual TLS.

Real servers on loopback. Under mutual TLS a plain ``GET`` cannot pass the handshake, so the
probe speaks the service's ``[tls]``: it trusts only the service's own certificate and
presents it as the client certificate. The coordinator is not ready while its counting
service is down, and a port where nothing listens, or where another certificate is served,
fails the probe with one line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Literal

import httpx
import pytest

from fedclust import pki
from fedclust.config_files import FederationFiles, write_federation
from fedclust.coordinator.app import create_app as create_coordinator
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.counting.app import create_app as create_counting
from fedclust.counting.settings import CountingSettings
from fedclust.demo import free_port
from fedclust.infra.tls import TlsSettings
from fedclust.probe import main, probe
from tests._servers import ServerThread


def _federation(root: Path, tls: Literal["none", "mutual"]) -> FederationFiles:
    data = {"hospital-a": "a.csv", "hospital-b": "b.csv", "hospital-c": "c.csv"}  # unread
    return write_federation(
        root, data=data, coordinator_port=free_port(), counting_port=free_port(),
        tls=tls,
    )


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.mark.parametrize("tls", ["none", "mutual"])
def test_the_probe_passes_a_ready_service_and_fails_one_whose_counting_service_is_down(
    tmp_path: Path, tls: Literal["none", "mutual"], capsys: pytest.CaptureFixture[str]
) -> None:
    files = _federation(tmp_path, tls)
    counting_settings = CountingSettings.from_file(files.counting)
    coordinator_settings = CoordinatorSettings.from_file(files.coordinator)
    assert counting_settings.tls.verifies_clients == (tls == "mutual")
    coordinator = ServerThread(
        create_coordinator(coordinator_settings), _port(files.coordinator_url),
        **coordinator_settings.tls.uvicorn_options(),
    ).start()
    try:
        # The counting service is not running yet: live, but not ready.
        assert main(["coordinator", "--config", str(files.coordinator), "--live"]) == 0
        assert main(["coordinator", "--config", str(files.coordinator)]) == 1
        line = capsys.readouterr().err.strip()
        assert line.startswith("fedclust probe: coordinator not ready: ")
        assert "/readyz: HTTP 503" in line and "\n" not in line
        counting = ServerThread(
            create_counting(counting_settings), _port(files.counting_url),
            **counting_settings.tls.uvicorn_options(),
        ).start()
        try:
            assert main(["counter", "--config", str(files.counting)]) == 0
            assert main(["coordinator", "--config", str(files.coordinator)]) == 0
            if tls == "mutual":  # control: a plain client is refused at the handshake
                with pytest.raises(httpx.TransportError), httpx.Client(verify=False) as http:
                    http.get(f"{files.coordinator_url}/readyz")
        finally:
            counting.stop()
    finally:
        coordinator.stop()


def test_nothing_listening_and_another_certificate_fail_the_probe(tmp_path: Path) -> None:
    files = _federation(tmp_path, "mutual")
    settings = CountingSettings.from_file(files.counting)
    port = _port(files.counting_url)
    problem = probe("127.0.0.1", port, settings.tls)
    assert problem is not None and f"https://127.0.0.1:{port}/readyz" in problem
    # Another process on the port, serving a certificate of the same CA that is not the
    # service's own: the probe trusts only the service's certificate.
    other = pki.issue("impostor", files.root / "pki", tmp_path, ips=["127.0.0.1"])
    impostor = TlsSettings(
        certificate=other.certificate, key=other.key, client_ca=files.root / "pki" / "ca.pem"
    )
    server = ServerThread(create_counting(settings), port, **impostor.uvicorn_options()).start()
    try:
        problem = probe("127.0.0.1", port, settings.tls)
        assert problem is not None and "is not the service's own" in problem
        assert probe("127.0.0.1", port, impostor) is None  # its own certificate: trusted
    finally:
        server.stop()


def test_the_probe_runs_as_a_module_and_names_a_bad_config(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fedclust.probe", "counter", "--config",
         str(tmp_path / "absent.toml")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("fedclust probe: ") and "absent.toml" in done.stderr
