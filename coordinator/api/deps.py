"""Dependencies of the coordinator's routes: the services and bearer-token identities.

Handlers take ``Analyst`` or ``CurrentParticipant`` parameters (``Annotated`` aliases), so
no route can forget authentication: no or an unknown token → 401 (``WWW-Authenticate:
Bearer``); a valid token of the wrong role → 403. Under mutual TLS every token is bound to
its holder's certificate (a participant's id, an analyst's or admin's configured name): a
token presented with a certificate naming anyone else → 403, before any handler runs, and
before the body guard reads a body (:meth:`Authenticator.caller`). Tokens are known by their
SHA-256 only and never logged. Each alias is one dependency (authentication and role check
together), and a coroutine: it does no I/O, and a worker-thread hop would cost more than its
work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Generic, TypeVar

from fastapi import Depends, HTTPException, Request, status
from fastapi.openapi.models import HTTPBearer as HTTPBearerModel
from fastapi.security.base import SecurityBase

from fedclust.coordinator.broker import Broker
from fedclust.coordinator.counting_client import CountingClient
from fedclust.coordinator.db import Database
from fedclust.coordinator.runner import JobRunner
from fedclust.coordinator.settings import AnalystRole, CoordinatorSettings
from fedclust.crypto.tokens import token_sha256
from fedclust.infra.app import identifier_path
from fedclust.infra.auth import ParticipantIdentity, bound_caller
from fedclust.infra.tls import TlsSettings
from fedclust.protocol.wire.messages import ErrorDetail

__all__ = [
    "Admin",
    "Analyst",
    "AnalystIdentity",
    "Authenticator",
    "CurrentParticipant",
    "Identity",
    "JobId",
    "ParticipantId",
    "ParticipantIdentity",
    "Services",
    "ServicesDep",
    "authenticate",
    "error_responses",
    "get_services",
    "participant_caller",
    "unprocessable",
]

#: The path parameters that name a job or a participant.
JobId = Annotated[str, identifier_path()]
ParticipantId = Annotated[str, identifier_path()]


@dataclass(frozen=True)
class AnalystIdentity:
    """An authenticated analyst; an admin sees every job, an analyst the jobs it created.
    Under mutual TLS its certificate must carry ``name``."""

    name: str
    role: AnalystRole = "analyst"

    def sees(self, owner: str | None) -> bool:
        """Whether this analyst may see a job created by ``owner`` (None: created before
        owners were recorded, seen by every analyst as before)."""
        return self.role == "admin" or owner is None or owner == self.name

    def certificate_name(self, tls: TlsSettings) -> tuple[str, str]:
        return self.role, self.name


Identity = AnalystIdentity | ParticipantIdentity
_Role = TypeVar("_Role", bound=Identity)


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

    def caller(self, scope: Mapping[str, Any]) -> Identity:
        """The principal a request authenticates as, its token bound to its certificate
        (:func:`infra.auth.bound_caller`): 401 without a known bearer token (or a certificate
        standing for one), 403 with a certificate naming someone else. The routes
        (:data:`authenticate`) and the body guard (before a body is read) both ask this.
        """
        return bound_caller(
            scope, tls=self._tls, identify=self.identify, is_member=self.is_member,
            missing="a bearer token is required", unknown="unknown bearer token",
        )

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

def _identity(request: Request) -> Identity:
    """The caller's identity (:meth:`Authenticator.caller`), a participant's contact noted."""
    authenticator: Authenticator = request.app.state.authenticator
    identity = authenticator.caller(request.scope)
    if isinstance(identity, ParticipantIdentity):
        authenticator.contacted(identity.id)
    return identity


def _any(identity: Identity) -> Identity:
    return identity


def _participant(identity: Identity) -> ParticipantIdentity:
    """403 unless the caller is a participant."""
    if not isinstance(identity, ParticipantIdentity):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this operation needs a participant token")
    return identity


def _analyst(identity: Identity) -> AnalystIdentity:
    """403 unless the caller is an analyst."""
    if not isinstance(identity, AnalystIdentity):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this operation needs an analyst token")
    return identity


def _admin(identity: Identity) -> AnalystIdentity:
    """403 unless the caller is an analyst with role "admin"."""
    analyst = _analyst(identity)
    if analyst.role != "admin":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this operation needs an admin's token")
    return analyst


class _Bearer(SecurityBase, Generic[_Role]):
    """The OpenAPI document's bearer scheme as one dependency that authenticates the request
    (:func:`_identity`: 401 without a known bearer token or, where the service lets a
    certificate stand for the token, a client certificate naming a member; 403 for a token
    presented with a certificate naming someone else) and checks the caller's role
    (``check``: 403). One dependency, not a chain: FastAPI resolves each nested dependency
    anew on every request, at a cost the participants' per-round requests feel."""

    def __init__(self, check: Callable[[Identity], _Role]) -> None:
        self.model = HTTPBearerModel(
            description="Bearer token of an analyst or a participant"
        )
        self.scheme_name = "HTTPBearer"
        self._check = check

    async def __call__(self, request: Request) -> _Role:
        return self._check(_identity(request))


#: The caller, analyst or participant (for routes either may call).
authenticate: Final = _Bearer(_any)
Analyst = Annotated[AnalystIdentity, Depends(_Bearer(_analyst))]
Admin = Annotated[AnalystIdentity, Depends(_Bearer(_admin))]
#: The participant calling (401/403 otherwise), as :data:`CurrentParticipant` resolves it:
#: ``await participant_caller(request)``.
participant_caller: Final = _Bearer(_participant)
CurrentParticipant = Annotated[ParticipantIdentity, Depends(participant_caller)]

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
