"""Fuzz the coordinator's and the counting service's HTTP APIs from their OpenAPI documents.

schemathesis generates requests for every operation of each live app (valid ones, and
invalid ones: wrong types, out-of-range numbers, missing fields), sends them in process to
the started app (lifespan entered, through Starlette's ``TestClient``) with a valid token of
the role the operation wants, and applies its ``not_a_server_error`` check: every hostile
request must get a clean 4xx, never a 5xx. The coordinator's participants are enrolled
first, so some generated jobs really start.

``tests/test_fuzz_api.py`` runs a few derandomised examples per operation; this script runs
many and prints the number of cases and failures per service.

Run: ``python -m benchmarks.fuzz_api [--examples 200] [--seed 0]``
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import hypothesis.errors
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err

from fedclust.coordinator.app import create_app as create_coordinator
from fedclust.coordinator.settings import (
    AnalystCredential,
    CoordinatorSettings,
    ParticipantCredential,
)
from fedclust.counting.app import create_app as create_counting
from fedclust.counting.settings import CountingSettings
from fedclust.counting.settings import ParticipantCredential as CountingParticipant
from fedclust.crypto.tokens import token_sha256

__all__ = ["FuzzReport", "TokenFor", "coordinator_client", "counting_client", "fuzz", "main"]

ANALYST_TOKEN = "fuzz-analyst-token"
COORDINATOR_TOKEN = "fuzz-coordinator-token"
PARTICIPANTS = ("p0", "p1", "p2")
BASE_URL = "http://testserver"
_MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
#: Coordinator operations a participant calls; every other one an analyst.
_COORDINATOR_PARTICIPANT_TAGS = frozenset({"tasks", "audit"})
_COORDINATOR_PARTICIPANT_OPS = frozenset({"enrol_participant", "get_participant_job_result"})
#: Counting-service operations a participant calls; every other one the coordinator.
_COUNTING_PARTICIPANT_OPS = frozenset({"report_count", "report_paillier_contribution"})


#: Which token an operation is called with, from its operation id and tags.
TokenFor = Callable[[str, list[str]], str]
#: A started service's test client and its :data:`TokenFor`.
Started = Iterator[tuple[TestClient, TokenFor]]


def _participant_token(name: str) -> str:
    return f"fuzz-token-of-{name}"


@dataclass
class FuzzReport:
    """How many cases were sent, to which operations, and what failed (operation, status,
    check message)."""

    service: str
    cases: int = 0
    operations: set[str] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)


class _NoCounting(httpx.BaseTransport):
    """The coordinator's counting service during fuzzing: every call is refused (409)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"detail": "no counting service while fuzzing"})


@contextlib.contextmanager
def coordinator_client(workdir: Path) -> Started:
    """A started coordinator with the participants enrolled, and who calls which operation."""
    settings = CoordinatorSettings(
        counting_url="http://counting.invalid",
        counting_token="unused",
        analysts=(AnalystCredential("fuzz", token_sha256(ANALYST_TOKEN)),),
        participants=tuple(
            ParticipantCredential(p, token_sha256(_participant_token(p))) for p in PARTICIPANTS
        ),
        database_url=f"sqlite:///{workdir / 'coordinator.db'}",
        task_timeout_seconds=5.0,
    )
    app = create_coordinator(settings, counting_transport=_NoCounting())

    def token_for(operation_id: str, tags: list[str]) -> str:
        participant_tag = bool(_COORDINATOR_PARTICIPANT_TAGS & set(tags))
        if operation_id in _COORDINATOR_PARTICIPANT_OPS or participant_tag:
            return _participant_token(PARTICIPANTS[0])
        return ANALYST_TOKEN

    with TestClient(app, raise_server_exceptions=False) as client:
        for name in PARTICIPANTS:
            client.post(
                "/api/v1/participants/enrol",
                json={"n_features": 2, "allowed_algorithms": ["ffcm", "fedfcm", "fkm", "kfed"]},
                headers={"Authorization": f"Bearer {_participant_token(name)}"},
            ).raise_for_status()
        yield client, token_for


@contextlib.contextmanager
def counting_client(workdir: Path) -> Started:
    """A started counting service, and who calls which operation."""
    settings = CountingSettings(
        coordinator_token_sha256=token_sha256(COORDINATOR_TOKEN),
        participants=tuple(
            CountingParticipant(id=p, token_sha256=token_sha256(_participant_token(p)))
            for p in PARTICIPANTS
        ),
        database_url=f"sqlite:///{workdir / 'counting.db'}",
        min_participants=3,
        paillier_bits=1024,
    )
    app = create_counting(settings)

    def token_for(operation_id: str, tags: list[str]) -> str:
        if operation_id in _COUNTING_PARTICIPANT_OPS:
            return _participant_token(PARTICIPANTS[0])
        return COORDINATOR_TOKEN

    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, token_for


def _send(client: TestClient, kwargs: dict[str, Any]) -> httpx.Response:
    """Send schemathesis' (requests-style) transport arguments through the test client."""
    request: dict[str, Any] = {
        "method": kwargs["method"], "url": kwargs["url"], "headers": kwargs.get("headers"),
        "params": kwargs.get("params") or None,
    }
    if "json" in kwargs:
        request["json"] = kwargs["json"]
    elif kwargs.get("data") is not None:
        data = kwargs["data"]
        request["content"] = data if isinstance(data, (bytes, str)) else None
        if not isinstance(data, (bytes, str)):
            request["data"] = data
    response: httpx.Response = client.request(**request)
    return response


def fuzz(
    service: str,
    app: FastAPI,
    client: TestClient,
    token_for: TokenFor,
    *,
    examples: int,
    seed: int | None = None,
) -> FuzzReport:
    """Send ``examples`` generated cases per operation and generation mode (valid and
    invalid) to ``client``; record every response that fails ``not_a_server_error``.

    With ``seed`` None the cases are derandomised (the same on every run).
    """
    report = FuzzReport(service)
    schema = schemathesis.openapi.from_dict(app.openapi())
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            report.failures.append(f"an operation of the OpenAPI document: {result.err()}")
            continue
        operation = result.ok()
        raw = operation.definition.raw
        token = token_for(str(raw.get("operationId", "")), list(raw.get("tags", [])))
        for mode in _MODES:
            _fuzz_operation(report, client, operation, mode, token=token, examples=examples,
                            seed=seed)
    return report


def _fuzz_operation(
    report: FuzzReport,
    client: TestClient,
    operation: schemathesis.APIOperation[Any, Any, Any, Any],
    mode: schemathesis.GenerationMode,
    *,
    token: str,
    examples: int,
    seed: int | None,
) -> None:
    """Up to ``examples`` cases of one operation in one generation mode."""
    headers = {"Authorization": f"Bearer {token}"}
    # No long polls: a generated wait of up to 60 s would only make the run slow.
    names = {p.get("name") for p in operation.definition.raw.get("parameters", [])}
    query = {"wait": 0} if "wait" in names else None

    @hypothesis.settings(
        max_examples=examples, deadline=None, database=None, derandomize=seed is None,
        phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode, query=query))
    def run(case: schemathesis.Case[Any]) -> None:
        response = _send(client, case.as_transport_kwargs(base_url=BASE_URL, headers=headers))
        report.cases += 1
        report.operations.add(operation.label)
        try:
            case.validate_response(response, checks=[not_a_server_error])
        except Exception as exc:  # schemathesis raises a failure group per case
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            report.failures.append(
                f"{operation.label} [{mode.value}]: {response.status_code} {first}"
            )

    if seed is not None:
        run = hypothesis.seed(seed)(run)
    with contextlib.suppress(hypothesis.errors.Unsatisfiable):
        run()  # unsatisfiable: no invalid request exists (an operation without inputs)


def run_both(*, examples: int, seed: int | None = None) -> list[FuzzReport]:
    """Fuzz the coordinator and the counting service in a temporary directory."""
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, factory in (("coordinator", coordinator_client), ("counting", counting_client)):
            with factory(work) as (client, token_for):
                reports.append(fuzz(name, client.app, client, token_for,  # type: ignore[arg-type]
                                    examples=examples, seed=seed))
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200,
                        help="cases per operation and generation mode (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    args = parser.parse_args(argv)
    failed = 0
    for report in run_both(examples=args.examples, seed=args.seed):
        print(f"{report.service}: {report.cases} cases, {len(report.failures)} failures")
        for failure in report.failures:
            print(f"  {failure}")
        failed += len(report.failures)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
