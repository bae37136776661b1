"""The analyst's HTTP client of the coordinator (``fedclust job ...`` and ``fedclust demo``).

Plain httpx over the REST API of ``/api/v1``; every response is parsed into the wire model of
:mod:`protocol.wire.messages`. An error response becomes :class:`ApiError` carrying the server's
``detail`` (FastAPI validation errors are flattened to ``field: message`` lines).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from fedclust.infra.config_env import EnvSchema
from fedclust.infra.config_toml import TABLE, ConfigFile, parse
from fedclust.infra.tls import ClientTls, TlsSettings
from fedclust.protocol.wire.admin import AdminEvent, Invitation, InvitationCreate
from fedclust.protocol.wire.messages import (
    DisclosureLedger,
    JobCreate,
    JobHistory,
    JobPublic,
    ParticipantPublic,
    ResultDocument,
)

__all__ = [
    "TERMINAL_STATES",
    "AnalystClient",
    "AnalystConfig",
    "ApiError",
    "format_progress",
]

API: Final = "/api/v1"
TERMINAL_STATES: Final = frozenset({"succeeded", "failed", "cancelled"})
ENV_URL: Final = "FEDCLUST_COORDINATOR_URL"
ENV_TOKEN: Final = "FEDCLUST_TOKEN"
_PARTICIPANTS: Final = TypeAdapter(list[ParticipantPublic])
_JOBS: Final = TypeAdapter(list[JobPublic])


class AnalystTable(BaseModel):
    """The ``[analyst]`` table (both keys checked by :class:`AnalystConfig`)."""

    model_config = ConfigDict(**TABLE, frozen=True)

    coordinator_url: str | None = None
    token: str | None = Field(default=None, repr=False)


class AnalystFile(ConfigFile):
    """The analyst's config file: ``[analyst]`` and an optional ``[tls]``."""

    analyst: AnalystTable | None = None
    tls: ClientTls | None = None


#: What ``FEDCLUST_ANALYST__...`` and ``FEDCLUST_TLS__...`` may give (infra.config_env).
_ENV: Final = EnvSchema.of(AnalystFile)
_EVENTS: Final = TypeAdapter(list[AdminEvent])


class ApiError(Exception):
    """An HTTP error answer of the coordinator: status code and the server's detail."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):  # FastAPI's 422: [{"loc": [...], "msg": "..."}, ...]
        lines = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                lines.append(f"{loc}: {item.get('msg', '')}" if loc else str(item.get("msg")))
            else:
                lines.append(str(item))
        return "; ".join(lines)
    return str(detail)


@dataclass(frozen=True)
class AnalystConfig:
    """Where the coordinator is, the analyst's bearer token (never shown by ``repr``) and
    the TLS settings of an ``https://`` coordinator (``[tls]``: ``ca``, and ``certificate``
    and ``key`` under mutual TLS; see :mod:`infra.tls`)."""

    coordinator_url: str
    token: str = field(repr=False)
    tls: TlsSettings = field(default_factory=TlsSettings)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> AnalystConfig:
        """Read ``[analyst] coordinator_url = "..." token = "..."`` (or ``token_file``) and an
        optional ``[tls]`` (paths relative to the file) from a TOML file alone."""
        layered = _ENV.load(path, what="the analyst's config file", environment=False)
        return layered.build(cls._from_mapping)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> AnalystConfig:
        """Read ``FEDCLUST_COORDINATOR_URL`` and ``FEDCLUST_TOKEN``."""
        env = dict(os.environ) if env is None else env
        return cls._checked(env.get(ENV_URL), env.get(ENV_TOKEN), "the environment")

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None) -> AnalystConfig:
        """``path`` (optional) with ``FEDCLUST_ANALYST__COORDINATOR_URL``,
        ``FEDCLUST_ANALYST__TOKEN`` (or ``..._TOKEN_FILE``) and ``FEDCLUST_TLS__*`` laid over
        it (:mod:`fedclust.infra.config_env`). Without a file, ``FEDCLUST_COORDINATOR_URL``
        and ``FEDCLUST_TOKEN`` count too (never over a file: a token exported for one
        coordinator is not sent to the one a file names)."""
        aliases = None
        if path is None:
            aliases = {ENV_URL: ("analyst", "coordinator_url"), ENV_TOKEN: ("analyst", "token")}
        layered = _ENV.load(path, what="the analyst's config file", aliases=aliases)
        if path is None and "analyst" not in layered.doc:
            raise ValueError(f"give --config CLIENT.toml or set {ENV_URL} and {ENV_TOKEN}")
        return layered.build(cls._from_mapping)

    @classmethod
    def _from_mapping(cls, doc: Mapping[str, Any], base: Path) -> AnalystConfig:
        file = parse(AnalystFile, doc)
        if file.analyst is None:
            raise ValueError("missing the [analyst] table")
        config = cls._checked(file.analyst.coordinator_url, file.analyst.token, "[analyst]")
        tls = TlsSettings.from_model(file.tls, base=base)
        return cls(coordinator_url=config.coordinator_url, token=config.token, tls=tls)

    @classmethod
    def _checked(cls, url: Any, token: Any, where: str) -> AnalystConfig:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"{where}: coordinator_url must be an http(s) URL")
        if not isinstance(token, str) or not token:
            raise ValueError(f"{where}: token must be a non-empty string")
        return cls(coordinator_url=url.rstrip("/"), token=token)


class AnalystClient:
    """Calls of the coordinator's analyst API; ``transport`` lets tests and benchmarks
    run it in process."""

    def __init__(
        self,
        config: AnalystConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._http = httpx.Client(
            base_url=config.coordinator_url + API,
            headers={"Authorization": f"Bearer {config.token}"},
            transport=transport,
            timeout=timeout,
            verify=config.tls.httpx_verify(),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AnalystClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, *, json: Any = None) -> Any:
        response = self._http.request(method, path, json=json)
        if response.status_code >= 400:
            raise ApiError(response.status_code, _detail(response))
        return response.json() if response.content else None

    def participants(self) -> list[ParticipantPublic]:
        return _PARTICIPANTS.validate_python(self._call("GET", "/participants"))

    def submit(self, spec: JobCreate) -> JobPublic:
        return JobPublic.model_validate(
            self._call("POST", "/jobs", json=spec.model_dump(mode="json"))
        )

    def jobs(self) -> list[JobPublic]:
        return _JOBS.validate_python(self._call("GET", "/jobs"))

    def job(self, job_id: str) -> JobPublic:
        return JobPublic.model_validate(self._call("GET", f"/jobs/{job_id}"))

    def result(self, job_id: str) -> ResultDocument:
        return ResultDocument.model_validate(self._call("GET", f"/jobs/{job_id}/result"))

    def disclosures(self, job_id: str) -> DisclosureLedger:
        """What the coordinator learned in the job (its disclosure ledger)."""
        return DisclosureLedger.model_validate(self._call("GET", f"/jobs/{job_id}/disclosures"))

    def history(self, job_id: str) -> JobHistory:
        """The job and every task it has handed out, with when each was stored and
        answered."""
        return JobHistory.model_validate(self._call("GET", f"/jobs/{job_id}/history"))

    def cancel(self, job_id: str) -> JobPublic:
        return JobPublic.model_validate(self._call("POST", f"/jobs/{job_id}/cancel"))

    def invite(self, participant_id: str, *, expires_in_seconds: int) -> Invitation:
        """A one-time invite for ``participant_id`` (an admin's call)."""
        body = InvitationCreate(
            participant_id=participant_id, expires_in_seconds=expires_in_seconds
        )
        return Invitation.model_validate(
            self._call("POST", "/admin/invitations", json=body.model_dump(mode="json"))
        )

    def revoke(self, participant_id: str) -> None:
        """Revoke a member at the coordinator and the counting service (an admin's call)."""
        self._call("DELETE", f"/admin/participants/{participant_id}")

    def admin_events(self) -> list[AdminEvent]:
        """The admin trail, oldest first (an admin's call)."""
        return _EVENTS.validate_python(self._call("GET", "/admin/audit"))

    def wait_enrolled(self, ids: list[str], *, timeout: float, poll: float = 0.1) -> None:
        """Block until every participant in ``ids`` has enrolled (TimeoutError otherwise)."""
        deadline = time.monotonic() + timeout
        while True:
            enrolled = {p.id for p in self.participants() if p.enrolled}
            missing = [i for i in ids if i not in enrolled]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"participants not enrolled after {timeout:.0f} s: {', '.join(missing)}"
                )
            time.sleep(poll)

    def follow(
        self,
        job_id: str,
        *,
        on_update: Callable[[JobPublic], None] | None = None,
        poll: float = 0.25,
        timeout: float | None = None,
    ) -> JobPublic:
        """Poll the job until it ends; ``on_update`` sees every polled state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if on_update is not None:
                on_update(job)
            if job.state in TERMINAL_STATES:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} has not finished after {timeout} s")
            time.sleep(poll)


def format_progress(job: JobPublic) -> str:
    """One line: state, stage, K, round, center shift, answered/waiting participants."""
    parts = [f"job {job.id}", job.state]
    p = job.progress
    if p is not None:
        parts.append(p.stage)
        if p.k is not None:
            parts.append(f"K={p.k}")
        if p.round is not None:
            parts.append(f"round {p.round}")
        if p.shift is not None:
            parts.append(f"shift {p.shift:.3g}")
        total = len(p.answered) + len(p.waiting_for)
        if total:
            parts.append(f"answered {len(p.answered)}/{total}")
        if p.waiting_for:
            parts.append("waiting for " + ", ".join(p.waiting_for))
    return "  ".join(parts)
