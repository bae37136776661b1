"""A participant's certificate instead of its token (``[tls] participant_auth = "certificate"``).

Over real sockets: a federation under mutual TLS whose services take a member's verified
client certificate alone, and whose agents hold no token, runs a job; a watch on both services
records every request's certificate names and whether it carried an Authorization header.
A certificate of the federation's CA naming no member, and a member's certificate once it is
revoked, are refused (401) by both services, before a body is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from fedclust import pki
from fedclust.client import AnalystClient, AnalystConfig
from fedclust.config_files import FederationFiles
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.infra.tls import TlsSettings, certificate_names, certified_member
from fedclust.participant.config import ParticipantConfig
from fedclust.protocol.wire.messages import JobCreate
from tests.test_tls import IDS, TlsServer, serve_mutual, write_mutual

CERTIFICATE_AUTH = 'participant_auth = "certificate"'


@dataclass
class Watch:
    """ASGI wrapper noting, per HTTP request, the client certificate's names and whether an
    Authorization header came with it."""

    app: Any
    seen: list[tuple[frozenset[str] | None, bool]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            names = {name.lower() for name, _ in scope.get("headers", [])}
            self.seen.append((certificate_names(scope), b"authorization" in names))
        await self.app(scope, receive, send)

    def participant_requests(self) -> list[bool]:
        """For each request whose certificate names a participant: whether it had a token."""
        return [auth for names, auth in self.seen if names and names & set(IDS)]


@dataclass
class Certified:
    files: FederationFiles
    coordinator: TlsServer
    counting: TlsServer
    coordinator_watch: Watch
    counting_watch: Watch

    @property
    def pki(self) -> Path:
        return self.files.root / "pki"

    def client(self, certificate_of: str, url: str) -> httpx.Client:
        """A client presenting ``certificate_of``'s certificate and no token."""
        tls = TlsSettings(
            ca=self.pki / "ca.pem",
            certificate=self.pki / f"{certificate_of}.pem",
            key=self.pki / f"{certificate_of}-key.pem",
        )
        return httpx.Client(base_url=url + "/api/v1", verify=tls.httpx_verify(), timeout=10)


def _take_certificates(files: FederationFiles) -> None:
    """Both services take certificates alone, no agent holds a token, the analyst is admin."""
    for path in (files.coordinator, files.counting):
        text = path.read_text("utf-8")
        assert text.count("\n[tls]\n") == 1
        path.write_text(text.replace("\n[tls]\n", f"\n[tls]\n{CERTIFICATE_AUTH}\n"), "utf-8")
    text = files.coordinator.read_text("utf-8")
    files.coordinator.write_text(
        text.replace('name = "analyst"\n', 'name = "analyst"\nrole = "admin"\n'), "utf-8"
    )
    for path in files.participants.values():
        text, removed = re.subn(r'(?m)^token = ".*"\n', "", path.read_text("utf-8"))
        assert removed == 1
        path.write_text(text, "utf-8")


@pytest.fixture(scope="module")
def certified(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Certified]:
    files = write_mutual(tmp_path_factory.mktemp("certified"), seed=5)
    _take_certificates(files)
    assert CoordinatorSettings.from_file(files.coordinator).tls.participant_auth == "certificate"
    configs = [ParticipantConfig.from_file(path) for path in files.participants.values()]
    assert all(c.token is None and c.auth_headers == {} for c in configs)
    watches: dict[str, Watch] = {}

    def watched(name: str, app: Any) -> Watch:
        watches[name] = Watch(app)
        return watches[name]

    with serve_mutual(files, wrap=watched) as (coordinator, counting):
        yield Certified(files, coordinator, counting, watches["coordinator"], watches["counting"])


def test_agents_without_tokens_run_a_masked_job_on_their_certificates(
    certified: Certified,
) -> None:
    with AnalystClient(AnalystConfig.from_file(certified.files.analyst)) as client:
        client.wait_enrolled(list(IDS), timeout=60)
        job = client.submit(
            JobCreate(algorithm="ffcm", participants=list(IDS), k=2, seed=1, max_rounds=10)
        )
        assert job.spec.protection == "masking"  # the default
        job = client.follow(job.id, poll=0.05, timeout=120)
    assert job.state == "succeeded", job.error
    for watch in (certified.coordinator_watch, certified.counting_watch):
        requests = watch.participant_requests()
        assert requests, "no participant request was seen: the check would be vacuous"
        assert not any(requests), "a participant sent an Authorization header"


def test_a_certificate_naming_no_member_is_refused(certified: Certified) -> None:
    stranger = pki.issue("stranger", certified.pki, certified.pki)
    assert stranger.certificate.name == "stranger.pem"
    with certified.client("stranger", certified.coordinator.url) as http:
        polled = http.get("/tasks/next", params={"wait": 0})
    with certified.client("stranger", certified.counting.url) as http:
        counted = http.post("/jobs/no-such-job/counts", json={"job_id": "no-such-job",
                                                              "count": 5})
    assert polled.status_code == 401, polled.text
    assert counted.status_code == 401, counted.text
    assert counted.json()["detail"] == "a valid bearer token is required"  # the body guard


def test_a_revoked_members_certificate_is_refused_at_once(certified: Certified) -> None:
    """The last test of the module: it revokes hospital-c."""
    body = {"job_id": "no-such-job", "count": 5}
    with (
        certified.client("hospital-c", certified.coordinator.url) as coordinator,
        certified.client("hospital-c", certified.counting.url) as counting,
    ):
        assert coordinator.get("/tasks/next", params={"wait": 0}).status_code in (200, 204)
        before = counting.post("/jobs/no-such-job/counts", json=body)
        # Authenticated: refused for the job, which has no roster.
        assert "no roster for job 'no-such-job'" in before.json()["detail"], before.text
        with AnalystClient(AnalystConfig.from_file(certified.files.analyst)) as client:
            client.revoke("hospital-c")
        assert coordinator.get("/tasks/next", params={"wait": 0}).status_code == 401
        assert counting.post("/jobs/no-such-job/counts", json=body).status_code == 401


# -- the rule, without sockets ---------------------------------------------------------------
def _scope_with_certificate(pem: bytes) -> dict[str, Any]:
    return {"type": "http", "extensions": {"tls": {"client_cert_chain": [pem.decode()]}}}


def test_a_certificate_stands_for_a_token_only_where_the_service_says_so(tmp_path: Path) -> None:
    pki.init_ca(tmp_path)
    one = pki.issue("hospital-a", tmp_path, tmp_path)
    both = pki.issue("two", tmp_path, tmp_path, dns=["hospital-a", "hospital-b"])
    ca = tmp_path / "ca.pem"
    token_mode = TlsSettings(certificate=one.certificate, key=one.key, client_ca=ca)
    certificate_mode = TlsSettings(
        certificate=one.certificate, key=one.key, client_ca=ca, participant_auth="certificate"
    )
    scope = _scope_with_certificate(one.certificate.read_bytes())
    members = {"hospital-a", "hospital-b"}.__contains__
    assert certified_member(scope, tls=token_mode, is_member=members) is None
    assert certified_member(scope, tls=certificate_mode, is_member=members) == "hospital-a"
    assert certified_member(scope, tls=certificate_mode, is_member=lambda _: False) is None
    assert certified_member({"type": "http"}, tls=certificate_mode, is_member=members) is None
    ambiguous = _scope_with_certificate(both.certificate.read_bytes())
    assert certified_member(ambiguous, tls=certificate_mode, is_member=members) is None


def test_certificate_authentication_needs_mutual_tls(tmp_path: Path) -> None:
    pki.init_ca(tmp_path)
    own = pki.issue("svc", tmp_path, tmp_path)
    table = {"certificate": str(own.certificate), "key": str(own.key), "ca": "ca.pem"}
    with pytest.raises(ValueError, match="participant_auth = \"certificate\" needs mutual TLS"):
        TlsSettings.from_table(table | {"participant_auth": "certificate"}, base=tmp_path)
    with pytest.raises(ValueError, match='participant_auth must be "token" or "certificate"'):
        TlsSettings.from_table(
            table | {"require_client_certificate": True, "participant_auth": "cert"},
            base=tmp_path,
        )
    chosen = TlsSettings.from_table(
        table | {"require_client_certificate": True, "participant_auth": "certificate"},
        base=tmp_path,
    )
    assert chosen.participant_auth == "certificate"


def test_a_participant_without_token_or_certificate_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "participant.toml"
    config.write_text(
        '[participant]\nid = "hospital-a"\ncoordinator_url = "https://127.0.0.1:1"\n'
        'counting_url = "https://127.0.0.1:2"\n\n[data]\npath = "a.csv"\n', "utf-8"
    )
    with pytest.raises(ValueError, match="missing 'token'"):
        ParticipantConfig.from_file(config)
