"""Helpers for the coordinator API tests: settings, a fake counting service, participant loops.

The fake counting service is served through ``httpx.MockTransport``; participants are
:class:`participant.local.LocalParticipant` objects answering through
:func:`participant.dispatch.execute` in threads, over the same ``TestClient`` (ASGI, no
sockets).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from fastapi.testclient import TestClient
from numpy.typing import NDArray

from fedclust.coordinator.app import create_app
from fedclust.coordinator.settings import (
    AnalystCredential,
    CoordinatorSettings,
    ParticipantCredential,
)
from fedclust.crypto.tokens import token_sha256
from fedclust.data.federations import Federation as DataFederation
from fedclust.participant.dispatch import execute
from fedclust.participant.local import LocalParticipant
from fedclust.participant.policy import Policy
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.messages import ResultDocument
from fedclust.simulate import simulate

API = "/api/v1"
ANALYST_TOKEN = "analyst-secret-token"
COUNTING_TOKEN = "coordinator-to-counting-token"
NAMES = ("participant-0", "participant-1", "participant-2")
OUTSIDER = "participant-9"  # configured, never part of the test jobs


def token(participant: str) -> str:
    return f"secret-of-{participant}"


def auth(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


ANALYST = auth(ANALYST_TOKEN)


def settings(
    tmp_path: Path, *, timeout: float = 30.0, database_url: str | None = None
) -> CoordinatorSettings:
    """Settings with one analyst, NAMES + OUTSIDER as participants, sqlite in tmp_path (or
    ``database_url``)."""
    return CoordinatorSettings(
        counting_url="http://counting.test",
        counting_token=COUNTING_TOKEN,
        analysts=(AnalystCredential("alice", token_sha256(ANALYST_TOKEN)),),
        participants=tuple(
            ParticipantCredential(p, token_sha256(token(p))) for p in (*NAMES, OUTSIDER)
        ),
        database_url=database_url or f"sqlite:///{tmp_path / 'coordinator.db'}",
        task_timeout_seconds=timeout,
    )


class FakeCounting:
    """The counting service's behaviour: a roster per job, N_l per participant, ΣN_l at 3."""

    def __init__(self, min_participants: int = 3) -> None:
        self.min = min_participants
        self.rosters: dict[str, list[str]] = {}
        self.counts: dict[str, dict[str, int]] = {}
        self.lock = threading.Lock()

    def report(self, job_id: str, participant: str, count: int) -> None:
        with self.lock:
            assert participant in self.rosters.get(job_id, []), "count before roster"
            got = self.counts.setdefault(job_id, {})
            assert participant not in got, "second count report"
            got[participant] = count

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("Authorization") != f"Bearer {COUNTING_TOKEN}":
            return httpx.Response(401, json={"detail": "unknown bearer token"})
        path = request.url.path
        if (found := re.fullmatch(r"/api/v1/jobs/([^/]+)/roster", path)) and (
            request.method == "PUT"
        ):
            body = msg.CountRoster.model_validate_json(request.content)
            with self.lock:
                self.rosters[found.group(1)] = list(body.participants)
            return httpx.Response(204)
        if (found := re.fullmatch(r"/api/v1/jobs/([^/]+)/total", path)) and (
            request.method == "GET"
        ):
            job_id = found.group(1)
            with self.lock:
                counts = self.counts.get(job_id, {})
                if len(counts) < self.min:
                    return httpx.Response(
                        409,
                        json={"detail": f"only {len(counts)} of min {self.min} participants "
                              "have reported"},
                    )
                total = msg.CountTotal(
                    job_id=job_id, total=sum(counts.values()), reporters=len(counts)
                )
            return httpx.Response(200, content=total.model_dump_json())
        return httpx.Response(404, json={"detail": "not found"})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)


@contextmanager
def running_app(
    tmp_path: Path, counting: FakeCounting, *, timeout: float = 30.0,
    database_url: str | None = None,
) -> Iterator[TestClient]:
    """A started coordinator app (lifespan entered) on the sqlite file in tmp_path (or
    ``database_url``)."""
    app = create_app(
        settings(tmp_path, timeout=timeout, database_url=database_url),
        counting_transport=counting.transport(),
    )
    with TestClient(app) as client:
        yield client


def blobs(seed: int = 0, n: int = 30) -> list[NDArray[np.float64]]:
    """Three participants' shares of three 2-D Gaussian blobs (uneven mixes)."""
    rng = np.random.default_rng(seed)
    means = np.array([[0.0, 0.0], [5.0, 5.0], [0.0, 6.0]])
    parts = []
    for i in range(len(NAMES)):
        labels = rng.integers(0, 3, size=n + 5 * i)
        parts.append(means[labels] + rng.normal(scale=0.7, size=(labels.size, 2)))
    return parts


def enrol(client: TestClient, participant: str, n_features: int = 2, **extra: Any) -> None:
    body = {"n_features": n_features, "allowed_algorithms": ["ffcm", "fedfcm", "fkm", "kfed"]}
    body.update(extra)
    response = client.post(f"{API}/participants/enrol", json=body, headers=auth(token(participant)))
    assert response.status_code == 200, response.text


def create_job(client: TestClient, **spec: Any) -> dict[str, Any]:
    # These tests play the participants by hand, in the clear; masked jobs run with real
    # agents (tests/fedclust/test_inprocess.py, tests/test_e2e_http.py).
    body: dict[str, Any] = {
        "algorithm": "fedfcm", "participants": list(NAMES), "k": 3, "protection": "none"
    }
    body.update(spec)
    response = client.post(f"{API}/jobs", json=body, headers=ANALYST)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def wait_for_state(
    client: TestClient,
    job_id: str,
    states: tuple[str, ...],
    timeout: float = 30.0,
    *,
    seen: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Poll GET /jobs/{id} until its state is one of ``states`` (progress into ``seen``)."""
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"{API}/jobs/{job_id}", headers=ANALYST).json()
        if seen is not None and job["progress"] is not None:
            seen.append(job["progress"])
        if job["state"] in states:
            return job
        assert time.monotonic() < deadline, f"job still {job['state']}: {job.get('progress')}"
        time.sleep(0.02)


Submit = Callable[[TestClient, msg.Task, msg.Reply], None]


class Federation:
    """Participant agents in threads: LocalParticipant per job, answering via dispatch."""

    def __init__(self, parts: list[NDArray[np.float64]], counting: FakeCounting) -> None:
        self.parts = dict(zip(NAMES, parts, strict=True))
        self.counting = counting
        self.locals: dict[tuple[str, str], LocalParticipant] = {}
        self.answered: dict[str, int] = dict.fromkeys(NAMES, 0)
        self.errors: list[BaseException] = []

    def local(self, name: str, job_id: str) -> LocalParticipant:
        key = (name, job_id)
        if key not in self.locals:
            self.locals[key] = LocalParticipant(
                self.parts[name], name=name, policy=Policy(),
                count_sink=lambda who, n: self.counting.report(job_id, who, n),
            )
        return self.locals[key]

    def loop(
        self,
        client: TestClient,
        name: str,
        stop: threading.Event,
        *,
        max_answers: int | None = None,
        submit: Submit | None = None,
    ) -> None:
        try:
            while not stop.is_set():
                if max_answers is not None and self.answered[name] >= max_answers:
                    return
                response = client.get(
                    f"{API}/tasks/next", params={"wait": 0.2}, headers=auth(token(name))
                )
                if response.status_code == 204:
                    continue
                assert response.status_code == 200, response.text
                task = msg.Task.model_validate_json(response.content)
                reply = execute(self.local(name, task.job_id), task)
                if submit is not None:
                    submit(client, task, reply)
                else:
                    post_reply(client, name, task, reply, expect=202)
                self.answered[name] += 1
        except BaseException as exc:
            self.errors.append(exc)
            raise

    @contextmanager
    def agents(
        self,
        client: TestClient,
        *,
        max_answers: int | None = None,
        submit: dict[str, Submit] | None = None,
    ) -> Iterator[threading.Event]:
        stop = threading.Event()
        threads = [
            threading.Thread(
                target=self.loop,
                args=(client, name, stop),
                kwargs={"max_answers": max_answers, "submit": (submit or {}).get(name)},
                daemon=True,
            )
            for name in NAMES
        ]
        for t in threads:
            t.start()
        try:
            yield stop
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        assert not self.errors, self.errors


def post_reply(
    client: TestClient, name: str, task: msg.Task, reply: msg.Reply | dict[str, Any], *,
    expect: int,
) -> httpx.Response:
    """POST a contribution (a reply model, or a raw JSON reply dict for malformed ones)."""
    raw_reply = reply if isinstance(reply, dict) else json.loads(reply.model_dump_json())
    body = {"protocol_version": 4, "job_id": task.job_id, "task_id": task.task_id,
            "reply": raw_reply}
    response: httpx.Response = client.post(
        f"{API}/jobs/{task.job_id}/tasks/{task.task_id}/contribution",
        json=body, headers=auth(token(name)),
    )
    assert response.status_code == expect, response.text
    return response


def assert_same_result(got: ResultDocument, want: ResultDocument) -> None:
    # Tolerance 1e-12: the service runs the same functions on bit-exact wire arrays; only
    # the order of floating-point sums could differ (it does not: participants are combined
    # in roster order), so agreement should be to rounding.
    assert got.k_selected == want.k_selected
    assert got.k_elbow == want.k_elbow
    assert got.local_k == want.local_k
    assert [e.k for e in got.sweep] == [e.k for e in want.sweep]
    for g, w in zip(got.sweep, want.sweep, strict=True):
        assert abs(g.fed_fuzzy_db - w.fed_fuzzy_db) <= 1e-12
        assert [c is None for c in g.centers] == [c is None for c in w.centers]
        np.testing.assert_allclose(
            [c for c in g.centers if c is not None], [c for c in w.centers if c is not None],
            rtol=0, atol=1e-12,
        )
        assert g.rounds == w.rounds
        assert abs(g.simplified_silhouette - w.simplified_silhouette) <= 1e-12


SPEC: dict[str, Any] = {
    "algorithm": "fedfcm", "k": None, "k_range": [2, 4], "seed": 11, "standardise": True,
    "local_k_range": [2, 3],
}


def expected_document(parts: list[Any]) -> ResultDocument:
    federation = DataFederation("blobs", tuple(parts))
    report = simulate(
        federation, algorithm="fedfcm", ks=[2, 3, 4], seed=11, standardise=True, local_ks=[2, 3],
        protection="none",
    )
    return report.to_document()
