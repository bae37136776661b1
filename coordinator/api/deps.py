"""Dependencies of the coordinator's routes: the services and bearer-token identities.

Handlers take ``Analyst`` or ``CurrentParticipant`` parameters (``Annotated`` aliases), so
no route can forget authentication: no or an unknown token → 401 (``WWW-Authenticate:
Bearer``); a valid token of the wrong role → 403. Tokens are known by their SHA-256 only
and never logged. The dependencies are coroutines: they do no I/O, and a worker-thread hop
each would cost more than their work.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Final

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from fedclust.coordinator.broker import Broker
from fedclust.coordinator.counting_client import CountingClient
from fedclust.coordinator.db import Database
from fedclust.coordinator.runner import JobRunner
from fedclust.coordinator.settings import AnalystRole, CoordinatorSettings
from fedclust.crypto.tokens import token_sha256
from fedclust.protocol.messages import ErrorDetail
from fedclust.protocol.tls import certificate_mismatch, certified_member

__all__ = [
    "Admin",
    "Analyst",
    "AnalystIdentity",
    "Authenticator",
    "CurrentParticipant",
    "Identity",
    "ParticipantIdentity",
    "Services",
    "ServicesDep",
    "authenticate",
    "error_responses",
    "unprocessable",
]


@dataclass(frozen=True)
class AnalystIdentity:
    """An authenticated analyst; an admin sees every job, an analyst the jobs it created."""

    name: str
    role: AnalystRole = "analyst"

    def sees(self, owner: str | None) -> bool:
        """Whether this analyst may see a job created by ``owner`` (None: created before
        owners were recorded, seen by every analyst as before)."""
        return self.role == "admin" or owner is None or owner == self.name


@dataclass(frozen=True)
class ParticipantIdentity:
    """An authenticated participant."""

    id: str


Identity = AnalystIdentity | ParticipantIdentity


class Authenticator:
    """Maps a presented token to its identity through the known SHA-256 hashes.

    The presented token's digest is looked up in a table (constant work however many
    participants are configured): the lookup's timing depends only on that digest, which
    reveals nothing about a stored one, and the response already shows whether it matched.

    Participants come from the config file and from run-time memberships
    (:meth:`set_membership`: a member that joined with an invitation, or a revoked one); a
    membership supersedes the config file's entry for that id. Each change swaps in a new
    table, so it applies from the next request on, without a restart. One coordinator
    process serves a database (its broker keeps running jobs in memory), so this table is
    the whole truth: :meth:`load` reads the memberships at start-up.
    """

    def __init__(self, settings: CoordinatorSettings) -> None:
        self._analysts: dict[str, Identity] = {
            a.token_sha256: AnalystIdentity(a.name, a.role) for a in settings.analysts
        }
        self._configured: dict[str, str] = {p.id: p.token_sha256 for p in settings.participants}
        self._tls = settings.tls
        self._memberships: dict[str, str | None] = {}
        self._lock = threading.Lock()
        self._by_digest: dict[str, Identity] = {}
        self._rebuild()
        self.last_contact: dict[str, datetime] = {}

    def _rebuild(self) -> None:
        digests = self._configured | self._memberships
        self._by_digest = self._analysts | {
            digest: ParticipantIdentity(pid) for pid, digest in digests.items()
            if digest is not None
        }

    def load(self, memberships: Mapping[str, str | None]) -> None:
        """Take the stored run-time memberships (id → token SHA-256, None: revoked)."""
        with self._lock:
            self._memberships = dict(memberships)
            self._rebuild()

    def set_membership(self, participant_id: str, token_sha256: str | None) -> None:
        """Give ``participant_id`` a new credential, or none (revoked), from now on."""
        with self._lock:  # copy on write: readers iterate the old dict undisturbed
            self._memberships = self._memberships | {participant_id: token_sha256}
            self._rebuild()

    def participant_ids(self) -> list[str]:
        """The current members: the config file's (in its order, unless revoked), then those
        that joined at run time."""
        memberships = self._memberships
        ids = [
            pid for pid in self._configured
            if pid not in memberships or memberships[pid] is not None
        ]
        return ids + [
            pid for pid, digest in memberships.items()
            if digest is not None and pid not in self._configured
        ]

    def is_member(self, participant_id: str) -> bool:
        """Whether ``participant_id`` has a working credential now."""
        if participant_id in self._memberships:
            return self._memberships[participant_id] is not None
        return participant_id in self._configured

    def identify(self, token: str) -> Identity | None:
        return self._by_digest.get(token_sha256(token)) if token else None

    def knows(self, token: str) -> bool:
        """Whether ``token`` is any configured caller's (the body guard's question)."""
        return self.identify(token) is not None

    def certified(self, scope: Mapping[str, Any]) -> ParticipantIdentity | None:
        """The member whose client certificate alone authenticates a request without a
        token, where ``[tls] participant_auth = "certificate"`` (:func:`certified_member`)."""
        pid = certified_member(scope, tls=self._tls, is_member=self.is_member)
        return None if pid is None else ParticipantIdentity(pid)

    def knows_certificate(self, scope: Mapping[str, Any]) -> bool:
        """Whether a request's client certificate alone identifies a member (the body guard's
        question for a request without a token)."""
        return self.certified(scope) is not None

    def contacted(self, participant: str) -> None:
        """Note an authenticated request from ``participant`` now (kept in memory)."""
        self.last_contact[participant] = datetime.now(UTC)


@dataclass(frozen=True)
class Services:
    """What the routes use; built by the app's lifespan."""

    settings: CoordinatorSettings
    db: Database
    broker: Broker
    counting: CountingClient
    runner: JobRunner


async def get_services(request: Request) -> Services:
    services: Services | None = getattr(request.app.state, "services", None)
    if services is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "the coordinator is not running")
    return services


ServicesDep = Annotated[Services, Depends(get_services)]

_bearer = HTTPBearer(auto_error=False, description="Bearer token of an analyst or a participant")

_UNAUTHENTICATED: Final = {"WWW-Authenticate": "Bearer"}


async def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Identity:
    """The caller's identity; 401 without a known bearer token (or, where the service lets a
    certificate stand for the token, a client certificate naming a member)."""
    authenticator: Authenticator = request.app.state.authenticator
    if credentials is None:
        certified = authenticator.certified(request.scope)
        if certified is not None:
            authenticator.contacted(certified.id)
            return certified
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "a bearer token is required", headers=_UNAUTHENTICATED
        )
    identity = authenticator.identify(credentials.credentials)
    if identity is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "unknown bearer token", headers=_UNAUTHENTICATED
        )
    if isinstance(identity, ParticipantIdentity):
        authenticator.contacted(identity.id)
    return identity


async def require_analyst(identity: Annotated[Identity, Depends(authenticate)]) -> AnalystIdentity:
    """403 unless the caller is an analyst."""
    if not isinstance(identity, AnalystIdentity):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this operation needs an analyst token")
    return identity


async def require_participant(
    identity: Annotated[Identity, Depends(authenticate)],
) -> ParticipantIdentity:
    """403 unless the caller is a participant."""
    if not isinstance(identity, ParticipantIdentity):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this operation needs a participant token")
    return identity


Analyst = Annotated[AnalystIdentity, Depends(require_analyst)]


async def require_admin(analyst: Analyst) -> AnalystIdentity:
    """403 unless the caller is an analyst with role "admin"."""
    if analyst.role != "admin":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this operation needs an admin's token")
    return analyst


Admin = Annotated[AnalystIdentity, Depends(require_admin)]


async def require_certified_participant(
    request: Request,
    identity: Annotated[ParticipantIdentity, Depends(require_participant)],
    services: ServicesDep,
) -> ParticipantIdentity:
    """Under mutual TLS, 403 unless the client certificate names the token's participant."""
    mismatch = certificate_mismatch(request.scope, identity.id, tls=services.settings.tls)
    if mismatch is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, mismatch)
    return identity


CurrentParticipant = Annotated[ParticipantIdentity, Depends(require_certified_participant)]

_DESCRIPTIONS: Final = {
    401: "No bearer token, or an unknown one",
    403: "The token's role may not do this, or the resource is another participant's",
    404: "No such resource",
    409: "The resource is not in a state that allows this",
    422: "The request is malformed or inconsistent",
    502: "The counting service did not take the change (the detail says what took effect)",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the given error codes."""
    return {code: {"model": ErrorDetail, "description": _DESCRIPTIONS[code]} for code in codes}


def unprocessable(field: str, message: str) -> HTTPException:
    """A 422 shaped like FastAPI's validation errors (never echoing values)."""
    return HTTPException(
        status.HTTP_422_UNPROCESSABLE_CONTENT,
        detail=[{"loc": ["body", field], "msg": message, "type": "value_error"}],
    )
