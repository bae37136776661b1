"""Routes of the counting service (mounted under ``/api/v1`` by :func:`counting.app.create_app`).

The coordinator sets a job's roster (``put_roster``), reads ΣN_l (``get_total``), asks for a
Paillier round's decryption (``paillier_decrypt``, rule in :mod:`counting.keyholder`) and asks
for or revokes members (``put_member``, ``revoke_member``); roster participants report N_l
(``report_count``), announce masked-sum cohorts (``announce_cohort``), register unmasking
views (``register_unmasking``), fetch the Paillier key and announce contributions.
Release rule: a total is released once, only when every roster participant (at least
``min_participants``) has reported, never over a roster beyond one a reporter admitted, and
never when with the cohorts released before it would expose fewer than ``min_participants``
participants (:mod:`protocol.maths.release_guard`). Every route authenticates through an
``Annotated`` dependency (:data:`Coordinator`, :data:`Participant`; 401, or 403 for a wrong
role or certificate, :func:`caller_of`). Tokens and counts are never logged.

Design notes: ``docs/services.md`` (§ Counting service routes: the route table, release rule).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from fedclust.counting.db import (
    AlreadyReportedError,
    CountingStore,
    IncompleteJobError,
    NotOnRosterError,
    ReleaseRefusedError,
    RosterConflictError,
    RosterNotAdmittedError,
    UnknownJobError,
    ViewConflictError,
)
from fedclust.counting.keyholder import (
    KeyHolderError,
    PaillierKeyHolder,
)
from fedclust.counting.keyholder import (
    NotOnRosterError as PaillierNotOnRosterError,
)
from fedclust.counting.keyholder import (
    UnknownJobError as PaillierUnknownJobError,
)
from fedclust.counting.members import Members
from fedclust.counting.settings import CountingSettings
from fedclust.crypto.tokens import identify
from fedclust.infra.app import identifier_path
from fedclust.infra.auth import ParticipantIdentity, bound_caller
from fedclust.infra.body_limit import RouteLimit
from fedclust.infra.tls import TlsSettings
from fedclust.protocol.wire.admin import MemberToken
from fedclust.protocol.wire.messages import (
    CohortNotice,
    CountReport,
    CountRoster,
    CountTotal,
    PaillierContribution,
    PaillierDecryption,
    PaillierDecryptRequest,
    PaillierKey,
    UnmaskView,
)

__all__ = [
    "BODY_LIMITS",
    "Coordinator",
    "CoordinatorIdentity",
    "ErrorDetail",
    "Health",
    "Participant",
    "ParticipantIdentity",
    "caller_of",
    "router",
]

log = logging.getLogger("fedclust.counting")

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="The coordinator's token or a participant's token.",
)


class ErrorDetail(BaseModel):
    """The body of every error response."""

    detail: str


class Health(BaseModel):
    status: Literal["ok"] = "ok"


@dataclass(frozen=True)
class CoordinatorIdentity:
    """The caller presented the coordinator's token."""

    def certificate_name(self, tls: TlsSettings) -> tuple[str, str]:
        return "coordinator", tls.coordinator_name


def _settings(request: Request) -> CountingSettings:
    settings: CountingSettings = request.app.state.settings
    return settings


def _store(request: Request) -> CountingStore:
    store: CountingStore = request.app.state.store
    return store


def _keyholder(request: Request) -> PaillierKeyHolder:
    keyholder: PaillierKeyHolder = request.app.state.keyholder
    return keyholder


Settings = Annotated[CountingSettings, Depends(_settings)]
Store = Annotated[CountingStore, Depends(_store)]
KeyHolder = Annotated[PaillierKeyHolder, Depends(_keyholder)]


def _members(request: Request) -> Members:
    members: Members = request.app.state.members
    return members


def caller_of(
    scope: Mapping[str, Any], settings: CountingSettings, members: Members
) -> CoordinatorIdentity | ParticipantIdentity:
    """The principal a request authenticates as, its credential bound to its certificate
    (:func:`infra.auth.bound_caller`): the coordinator or a current member by its token (every
    stored digest compared, :func:`crypto.tokens.identify`), or a member by its certificate
    alone; 401 otherwise. Under mutual TLS a token counts only with its holder's certificate,
    the member's id or the coordinator's ``[tls] coordinator_name``, else 403: a member cannot
    act as the coordinator with a stolen token, nor as another member. The routes
    (:data:`Caller`) and the body guard (before a body is read) both ask this.
    """

    def holder(token: str) -> CoordinatorIdentity | ParticipantIdentity | None:
        candidates: list[tuple[str, CoordinatorIdentity | ParticipantIdentity]] = [
            (settings.coordinator_token_sha256, CoordinatorIdentity())
        ] + [(digest, ParticipantIdentity(pid)) for pid, digest in members.credentials()]
        return identify(token, candidates)

    return bound_caller(
        scope, tls=settings.tls, identify=holder, is_member=members.is_member,
        missing="a valid bearer token is required", unknown="a valid bearer token is required",
    )


def _identify(
    request: Request,
    settings: Settings,
    members: Annotated[Members, Depends(_members)],
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],  # documents the scheme
) -> CoordinatorIdentity | ParticipantIdentity:
    """The caller (:func:`caller_of`): 401 unauthenticated, 403 with another's certificate."""
    return caller_of(request.scope, settings, members)


Caller = Annotated[CoordinatorIdentity | ParticipantIdentity, Depends(_identify)]


#: Small bodies for small messages; every other route takes up to ``MAX_BODY_BYTES``.
BODY_LIMITS: tuple[RouteLimit, ...] = (
    ("PUT", r"/api/v1/jobs/[^/]+/roster", 1024 * 1024),  # 10,000 identifiers
    ("POST", r"/api/v1/jobs/[^/]+/counts", 1024 * 1024),  # the admitted roster
    ("POST", r"/api/v1/jobs/[^/]+/cohorts", 1024 * 1024),  # 10,000 identifiers
    ("POST", r"/api/v1/jobs/[^/]+/unmasking", 2 * 1024 * 1024),  # 2 x 10,000 identifiers
    ("POST", r"/api/v1/jobs/[^/]+/paillier/contributions", 1024 * 1024),  # the admitted roster
    ("PUT", r"/api/v1/participants/[^/]+", 4 * 1024),
)


def require_coordinator(caller: Caller) -> CoordinatorIdentity:
    """The caller, who must be the coordinator (403 otherwise)."""
    if not isinstance(caller, CoordinatorIdentity):
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="only the coordinator may do this")
    return caller


def require_participant(caller: Caller) -> ParticipantIdentity:
    """The caller, who must be an enrolled participant (403 otherwise)."""
    if not isinstance(caller, ParticipantIdentity):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, detail="only a participant may do this"
        )
    return caller


Coordinator = Annotated[CoordinatorIdentity, Depends(require_coordinator)]


Participant = Annotated[ParticipantIdentity, Depends(require_participant)]

JobId = Annotated[str, identifier_path("job id")]

_AUTH_ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorDetail, "description": "missing or unknown bearer token"},
    403: {"model": ErrorDetail, "description": "the token's role may not do this"},
}

#: The largest N_l accepted: 10,000 participants at this size still sum within 64 bits.
MAX_COUNT = 2**48

router = APIRouter()


def _unprocessable(loc: list[str], msg: str) -> HTTPException:
    """A 422 shaped like FastAPI's own validation errors (``detail`` is a list)."""
    return HTTPException(
        status.HTTP_422_UNPROCESSABLE_CONTENT,
        detail=[{"loc": loc, "msg": msg, "type": "value_error"}],
    )


def _same_job(path_id: str, body_id: str) -> None:
    if path_id != body_id:
        raise _unprocessable(
            ["body", "job_id"],
            f"job_id in the path ({path_id!r}) differs from the body's ({body_id!r})",
        )


@router.put(
    "/jobs/{job_id}/roster",
    operation_id="put_roster",
    tags=["counts"],
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={
        **_AUTH_ERRORS,
        409: {
            "model": ErrorDetail,
            "description": "counts exist and the roster is no subset of the job's, or the job "
            "released a statistic already: the roster is fixed",
        },
    },
)
def put_roster(
    job_id: JobId, roster: CountRoster, _: Coordinator, settings: Settings, store: Store,
    members: Annotated[Members, Depends(_members)],
) -> Response:
    """Register which participants take part in a job; the same roster again changes nothing.

    422 when a participant is not enrolled at this service, the roster is smaller than
    ``min_participants`` or the job ids differ; 409 when counts exist and the roster is no
    subset of the job's (after dropouts it narrows to those that go on, unreleased counts of
    the others deleted), or the job released its total or a Paillier round already.
    """
    _same_job(job_id, roster.job_id)
    unknown = members.unknown(roster.participants)
    if unknown:
        pending = [p for p in unknown if members.is_pending(p)]
        raise _unprocessable(
            ["body", "participants"],
            "participant(s) not enrolled at the counting service: "
            + ", ".join(repr(p) for p in unknown)
            + (
                "; " + ", ".join(repr(p) for p in pending) + " await(s) the counting "
                "operator's approval (fedclust counter members approve ID)"
                if pending else ""
            ),
        )
    if len(set(roster.participants)) != len(roster.participants):
        raise _unprocessable(["body", "participants"], "roster participants must be distinct")
    if len(roster.participants) < settings.min_participants:
        raise _unprocessable(
            ["body", "participants"],
            f"the counting service releases ΣN_l only for jobs with at least "
            f"{settings.min_participants} participants; this roster has "
            f"{len(roster.participants)}",
        )
    try:
        store.put_roster(job_id, roster.participants)
    except RosterConflictError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    log.info("job %s: roster of %d participants", job_id, len(roster.participants))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/jobs/{job_id}/counts",
    operation_id="report_count",
    tags=["counts"],
    status_code=status.HTTP_202_ACCEPTED,
    response_class=Response,
    responses={
        **_AUTH_ERRORS,
        403: {
            "model": ErrorDetail,
            "description": "the caller is not on the job's roster, or the job's roster here "
            "is not within the roster it admitted",
        },
        409: {"model": ErrorDetail, "description": "this participant has already reported"},
    },
)
def report_count(
    job_id: JobId, report: CountReport, caller: Participant, store: Store
) -> Response:
    """Record the calling participant's N_l for a job whose roster lists it, with the roster
    it admitted for the job; the job's roster here must be that roster or a narrowing of it
    (after dropouts), and no total is released over a roster outside it.

    403 when the caller is not on the job's roster or the job's roster is not within the
    caller's admitted roster; 409 on a second report; 422 for a bad body or a job id
    differing from the path's.
    """
    _same_job(job_id, report.job_id)
    if report.count > MAX_COUNT:
        raise _unprocessable(["body", "count"], f"count must be at most {MAX_COUNT}")
    try:
        store.report(job_id, caller.id, report.count, report.roster)
    except (UnknownJobError, NotOnRosterError, RosterNotAdmittedError) as exc:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=str(exc)) from None
    except AlreadyReportedError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    log.info("job %s: participant %s reported its count", job_id, caller.id)
    return Response(status_code=status.HTTP_202_ACCEPTED)


@router.get(
    "/jobs/{job_id}/total",
    operation_id="get_total",
    tags=["counts"],
    response_model=CountTotal,
    responses={
        **_AUTH_ERRORS,
        404: {"model": ErrorDetail, "description": "no roster for this job"},
        409: {
            "model": ErrorDetail,
            "description": "not every participant has reported yet, the roster reaches "
            "beyond the roster a reporter admitted, or, with the totals released before, "
            "this total would make a count of fewer than min_participants participants "
            "derivable (refused for good)",
        },
    },
)
def get_total(job_id: JobId, _: Coordinator, settings: Settings, store: Store) -> CountTotal:
    """ΣN_l of a job, once every participant on its roster (at least the minimum) reported.

    404 when the job has no roster; 409, saying how many have reported, until then. 409 when
    the roster reaches beyond the roster a reporter admitted for the job. 409 for good when
    this total, with the totals released before, would make a nonzero combination
    of the counts of fewer than ``min_participants`` participants derivable; the detail
    names those participants (the rosters are the coordinator's own), never a count.
    """
    try:
        tally = store.release(job_id, min_participants=settings.min_participants)
    except UnknownJobError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=str(exc)) from None
    except (IncompleteJobError, RosterNotAdmittedError) as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    except ReleaseRefusedError as exc:
        log.info("job %s: total refused (it would expose %d participants' counts)", job_id,
                 len(exc.participants))
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    log.info("job %s: total released (%d reporters)", job_id, tally.reporters)
    return CountTotal(job_id=job_id, total=tally.total, reporters=tally.reporters)


@router.post(
    "/jobs/{job_id}/cohorts",
    operation_id="announce_cohort",
    tags=["counts"],
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={
        **_AUTH_ERRORS,
        404: {"model": ErrorDetail, "description": "no roster for this job"},
        409: {
            "model": ErrorDetail,
            "description": "with the cohorts released before, this cohort would make a "
            "statistic of fewer than min_participants participants derivable (for good)",
        },
    },
)
def announce_cohort(
    job_id: JobId, notice: CohortNotice, caller: Participant, settings: Settings, store: Store
) -> Response:
    """Record the cohort of a masked sum the caller contributes to (idempotent); the
    participant contributes only after this 204. The coordinator unmasks that cohort's sum,
    so it is a released cohort for the guard of every later total, Paillier round and
    cohort (:mod:`protocol.maths.release_guard`): a masked sum over the survivors of a dropout,
    after one over everyone, is refused here, and the survivors refuse to contribute.

    403 when the caller or a member is off the job's roster or the caller is not in the
    cohort; 404 without roster; 409 (for good) when the guard refuses; 422 for a bad body.
    """
    _same_job(job_id, notice.job_id)
    try:
        store.announce_cohort(
            job_id, caller.id, notice.cohort, min_cohort=settings.min_participants
        )
    except UnknownJobError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=str(exc)) from None
    except NotOnRosterError as exc:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=str(exc)) from None
    except ReleaseRefusedError as exc:
        log.info("job %s: a masked cohort refused (it would expose %d participants)", job_id,
                 len(exc.participants))
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/jobs/{job_id}/unmasking",
    operation_id="register_unmasking",
    tags=["counts"],
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={
        **_AUTH_ERRORS,
        404: {"model": ErrorDetail, "description": "no roster for this job"},
        409: {
            "model": ErrorDetail,
            "description": "another view of this round was registered first, or the "
            "survivors, with the cohorts released before, would make a statistic of fewer "
            "than min_participants participants derivable (both for good)",
        },
    },
)
def register_unmasking(
    job_id: JobId, view: UnmaskView, caller: Participant, settings: Settings, store: Store
) -> Response:
    """Register the view of a masked sum's unmasking the caller is asked to answer: who
    survived, who dropped out. The first view of a round (job, key setup, round) is kept;
    that very view gets 204 again, any other 409, and the participant answers the unmasking
    only after this 204 — so the coordinator cannot show two groups two splits of one round
    and collect from the one a participant's pair keys, from the other its self-mask's
    shares. The survivors are a released cohort for the differencing guard, as with
    ``announce_cohort``.

    403 when the caller is not among the survivors or someone named is off the job's roster;
    404 without roster; 409 as above; 422 for a bad body (a participant both survived and
    dropped out, or is named twice).
    """
    _same_job(job_id, view.job_id)
    named = [*view.survivors, *view.dropped]
    if len(set(named)) != len(named):
        raise _unprocessable(
            ["body", "survivors"], "each participant is named once, as survivor or dropout"
        )
    try:
        store.register_unmasking(
            job_id, caller.id, view.setup, view.round, view.survivors, view.dropped,
            min_cohort=settings.min_participants,
        )
    except UnknownJobError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=str(exc)) from None
    except NotOnRosterError as exc:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=str(exc)) from None
    except ViewConflictError as exc:
        log.warning("job %s: a second view of masked sum %d refused", job_id, view.round)
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    except ReleaseRefusedError as exc:
        log.info("job %s: an unmasking cohort refused (it would expose %d participants)",
                 job_id, len(exc.participants))
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/health", operation_id="health", tags=["meta"], response_model=Health)
def health() -> Health:
    """Liveness check (no authentication)."""
    return Health()


def _refusal(exc: KeyHolderError) -> HTTPException:
    """404 for a job without roster, 403 for a caller off the roster, 409 otherwise."""
    if isinstance(exc, PaillierUnknownJobError):
        return HTTPException(status.HTTP_404_NOT_FOUND, detail=str(exc))
    if isinstance(exc, PaillierNotOnRosterError):
        return HTTPException(status.HTTP_403_FORBIDDEN, detail=str(exc))
    return HTTPException(status.HTTP_409_CONFLICT, detail=str(exc))


@router.get(
    "/jobs/{job_id}/paillier-key",
    operation_id="get_paillier_key",
    tags=["paillier"],
    response_model=PaillierKey,
    responses={
        **_AUTH_ERRORS, 404: {"model": ErrorDetail, "description": "no roster for this job"}
    },
)
def get_paillier_key(job_id: JobId, caller: Caller, keyholder: KeyHolder) -> PaillierKey:
    """The job's Paillier public key (generated on the first request).

    The coordinator or a participant on the job's roster (403 for anyone else); 404 when
    the job has no roster. Participants compare it with the key a task carries.
    """
    try:
        if isinstance(caller, ParticipantIdentity):
            keyholder.check_member(job_id, caller.id)
        return keyholder.public_key(job_id)
    except KeyHolderError as exc:
        raise _refusal(exc) from None


@router.post(
    "/jobs/{job_id}/paillier/contributions",
    operation_id="report_paillier_contribution",
    tags=["paillier"],
    status_code=status.HTTP_202_ACCEPTED,
    response_class=Response,
    responses={
        **_AUTH_ERRORS,
        404: {"model": ErrorDetail, "description": "no roster for this job"},
        409: {
            "model": ErrorDetail,
            "description": "the round was decrypted already, or the job's roster here is not "
            "within the roster the caller admitted",
        },
    },
)
def report_paillier_contribution(
    job_id: JobId, body: PaillierContribution, caller: Participant, keyholder: KeyHolder
) -> Response:
    """Record that the calling participant contributes to a Paillier round (idempotent),
    with the roster it admitted for the job.

    Sent before the participant encrypts; the round is decrypted only if the coordinator
    names exactly the participants recorded here, within each one's admitted roster. 403
    when the caller is not on the job's roster; 409 once the round was decrypted, or when
    the job's roster here is not within the caller's admitted roster; 422 when the job ids
    differ.
    """
    _same_job(job_id, body.job_id)
    try:
        keyholder.record_contribution(job_id, body.round, caller.id, body.roster)
    except KeyHolderError as exc:
        raise _refusal(exc) from None
    log.info("job %s: participant %s contributes to Paillier round %d", job_id, caller.id,
             body.round)
    return Response(status_code=status.HTTP_202_ACCEPTED)


@router.post(
    "/jobs/{job_id}/paillier/decrypt",
    operation_id="paillier_decrypt",
    tags=["paillier"],
    response_model=PaillierDecryption,
    responses={
        **_AUTH_ERRORS,
        404: {"model": ErrorDetail, "description": "no roster for this job"},
        409: {"model": ErrorDetail, "description": "the decryption rule refuses the request"},
    },
)
def paillier_decrypt(
    job_id: JobId, request: PaillierDecryptRequest, _: Coordinator, keyholder: KeyHolder
) -> PaillierDecryption:
    """Decrypt the aggregate of one Paillier round, once, if it sums the recorded contributors.

    409 (saying which rule) when the contributors differ from those recorded, reach beyond
    a contributor's admitted roster, are fewer than the minimum cohort, a field's count
    disagrees or it is under another key, or the round was decrypted before; 422 when the
    job ids differ.
    """
    _same_job(job_id, request.job_id)
    try:
        decryption = keyholder.decrypt(request)
    except KeyHolderError as exc:
        log.info("job %s: Paillier round %d decryption refused", job_id, request.round)
        raise _refusal(exc) from None
    log.info("job %s: Paillier round %d decrypted (%d contributors)", job_id, request.round,
             len(request.contributors))
    return decryption


ParticipantId = Annotated[str, identifier_path("participant id")]


@router.put(
    "/participants/{participant_id}",
    operation_id="put_member",
    tags=["members"],
    status_code=status.HTTP_202_ACCEPTED,
    response_class=Response,
    responses={
        **_AUTH_ERRORS,
        204: {"description": "this credential is in force already"},
        409: {"model": ErrorDetail, "description": "the token is another principal's"},
    },
)
def put_member(
    participant_id: ParticipantId, body: MemberToken, _: Coordinator,
    members: Annotated[Members, Depends(_members)],
) -> Response:
    """Ask for a member's credential (it joined or re-joined the federation): 202, the
    request waits for the counting operator's approval (``fedclust counter members approve``)
    and no token is accepted before; 204 when this very credential is in force already.
    Only the counting operator admits members, so a coordinator cannot invent one."""
    try:
        in_force = members.request(participant_id, body.token_sha256)
    except ValueError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    if in_force:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    log.warning(
        "participant %s: the coordinator asks for a credential; approve it with "
        "`fedclust counter members approve %s` once the organisation confirmed it",
        participant_id, participant_id,
    )
    return Response(status_code=status.HTTP_202_ACCEPTED)


@router.delete(
    "/participants/{participant_id}",
    operation_id="revoke_member",
    tags=["members"],
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=_AUTH_ERRORS,
)
def revoke_member(
    participant_id: ParticipantId, _: Coordinator,
    members: Annotated[Members, Depends(_members)],
) -> Response:
    """Refuse every token of ``participant_id`` from the next request on, and drop a pending
    request of it (idempotent). Its counts already reported stay; a job whose roster names it
    can no longer complete."""
    members.revoke(participant_id)
    log.info("participant %s: revoked by the coordinator", participant_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
