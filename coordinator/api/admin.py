"""Onboarding without restarts: invitations, joining, revocation and the admin trail.

- ``POST /admin/invitations`` (admin): a one-time invite for a participant id; the
  coordinator keeps only its SHA-256 and expiry, and refuses to invite a current member;
- ``POST /participants/join`` (no bearer token: the invite is the credential): the new
  organisation registers its identity key and receives its bearer token; the counting
  service is told the token's SHA-256 before the coordinator accepts it (under mutual TLS
  the client certificate must name the id joining);
- ``DELETE /admin/participants/{id}`` (admin): the member's token is refused from the next
  request on, at the coordinator and then at the counting service;
- ``GET /admin/audit`` (admin): the trail of those changes (never a secret);
- ``GET /ca`` (no token): the CA certificate the coordinator's TLS chain ends in, which an
  organisation enrolling with a bundled invite fetches and checks against the invite's
  SHA-256 before it trusts the connection (:mod:`participant.enrolment`).

Every refused invite gets the same 403, whether unknown, used, expired or for another id.
Invites and tokens are 256-bit random strings (:func:`crypto.tokens.new_token`), so
guessing is hopeless and no rate limit is needed; both are looked up by their SHA-256,
which reveals nothing about a stored one. A running job that names a revoked member treats
it as any participant that stops answering: once its task times out
(``task_timeout_seconds``) it has dropped out and the job goes on without it where the
statistics allow (``coordinator._rounds``); a new job naming it is refused (422).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from cryptography.hazmat.primitives.serialization import Encoding
from fastapi import APIRouter, HTTPException, Request, Response, status

from fedclust.coordinator.api.deps import (
    Admin,
    Authenticator,
    ParticipantId,
    ServicesDep,
    error_responses,
)
from fedclust.coordinator.counting_client import CountingError
from fedclust.coordinator.db import AdminEventRecord, InvitationRefusedError
from fedclust.crypto.tokens import new_token, token_sha256
from fedclust.infra.tls import certificate_mismatch, certificate_sha256, serving_ca
from fedclust.protocol.wire.admin import (
    AdminEvent,
    Invitation,
    InvitationCreate,
    JoinRequest,
    JoinResponse,
)
from fedclust.protocol.wire.messages import ErrorDetail

__all__ = ["router"]

router = APIRouter()
_log = logging.getLogger("fedclust.coordinator")

def _authenticator(request: Request) -> Authenticator:
    authenticator: Authenticator = request.app.state.authenticator
    return authenticator


def _event(record: AdminEventRecord) -> AdminEvent:
    return AdminEvent.model_validate(
        {"seq": record.seq, "at": record.at, "actor": record.actor, "action": record.action,
         "participant_id": record.participant_id, "expires_at": record.expires_at}
    )


@router.post(
    "/admin/invitations",
    status_code=status.HTTP_201_CREATED,
    response_model=Invitation,
    operation_id="create_invitation",
    tags=["admin"],
    summary="Invite an organisation to join as a participant (admin)",
    responses=error_responses(401, 403, 409, 422),
)
def create_invitation(
    body: InvitationCreate, request: Request, admin: Admin, services: ServicesDep
) -> Invitation:
    """A one-time invite for ``participant_id``, redeemable until it expires; 409 when the
    id is a current member (revoke it first to replace its credential)."""
    if _authenticator(request).is_member(body.participant_id):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"participant {body.participant_id!r} is already a member of the federation",
        )
    invite = new_token()
    expires_at = datetime.now(UTC) + timedelta(seconds=body.expires_in_seconds)
    services.db.add_invitation(
        body.participant_id, invite_sha256=token_sha256(invite), created_by=admin.name,
        expires_at=expires_at,
    )
    _log.info("admin %s invited participant %s", admin.name, body.participant_id)
    ca = serving_ca(services.settings.tls)
    return Invitation(
        participant_id=body.participant_id, invite=invite, expires_at=expires_at,
        coordinator_url=services.settings.public_url,
        ca_sha256=None if ca is None else certificate_sha256(ca),
    )


@router.get(
    "/ca",
    response_class=Response,
    operation_id="get_ca_certificate",
    tags=["meta"],
    summary="The CA certificate the coordinator's TLS chain ends in (PEM)",
    responses={
        200: {"content": {"application/x-pem-file": {}},
              "description": "The CA certificate, PEM"},
        **error_responses(404),
    },
)
def get_ca_certificate(services: ServicesDep) -> Response:
    """Public, as any CA certificate: a new member checks it against its invite's SHA-256
    before trusting it; 404 without HTTPS or when the CA is not among the ``[tls]`` files."""
    ca = serving_ca(services.settings.tls)
    if ca is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            "this coordinator serves no TLS chain ending in a CA of its [tls] files",
        )
    return Response(ca.public_bytes(Encoding.PEM), media_type="application/x-pem-file")


@router.post(
    "/participants/join",
    status_code=status.HTTP_201_CREATED,
    response_model=JoinResponse,
    operation_id="join_federation",
    tags=["participants"],
    summary="Redeem an invitation: register the identity key, receive the bearer token",
    responses={
        **error_responses(409, 422, 502),
        403: {"model": ErrorDetail,
              "description": "The invite is unknown, already used, expired or for another "
              "id (or, under mutual TLS, the client certificate names another id)"},
    },
)
def join_federation(body: JoinRequest, request: Request, services: ServicesDep) -> JoinResponse:
    """The invite is claimed once (a replay gets 403); the new token's SHA-256 goes to the
    counting service first, and if that fails the invite stays redeemable (502)."""
    mismatch = certificate_mismatch(request.scope, body.participant_id, tls=services.settings.tls)
    if mismatch is not None:  # under mutual TLS the certificate must name the id joining
        raise HTTPException(status.HTTP_403_FORBIDDEN, mismatch)
    invite_digest = token_sha256(body.invite)
    try:
        services.db.claim_invitation(body.participant_id, invite_digest)
    except InvitationRefusedError as exc:
        raise HTTPException(status.HTTP_403_FORBIDDEN, str(exc)) from None
    authenticator = _authenticator(request)
    if authenticator.is_member(body.participant_id):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"participant {body.participant_id!r} is already a member of the federation",
        )
    token = new_token()
    digest = token_sha256(token)
    try:
        in_force = services.counting.put_member(body.participant_id, digest)
    except CountingError as exc:
        services.db.release_invitation(invite_digest)
        raise HTTPException(
            status.HTTP_502_BAD_GATEWAY, f"{exc}; the invite stays valid: try again"
        ) from None
    services.db.set_membership(
        body.participant_id, digest, actor=f"participant:{body.participant_id}",
        identity_key=body.identity_key,
    )
    authenticator.set_membership(body.participant_id, digest)
    _log.info("participant %s joined the federation", body.participant_id)
    if not in_force:
        _log.warning(
            "participant %s takes part in jobs once the counting operator approves it "
            "(fedclust counter members approve %s)", body.participant_id, body.participant_id,
        )
    return JoinResponse(participant_id=body.participant_id, token=token)


@router.delete(
    "/admin/participants/{participant_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    operation_id="revoke_participant",
    tags=["admin"],
    summary="Revoke a member: its token is refused at once (admin)",
    responses=error_responses(401, 403, 404, 422, 502),
)
def revoke_participant(
    participant_id: ParticipantId, request: Request, admin: Admin, services: ServicesDep
) -> Response:
    """Revoke at the coordinator, then at the counting service; idempotent, so after a 502
    (the counting service did not take it) the same request finishes the revocation."""
    authenticator = _authenticator(request)
    if authenticator.is_member(participant_id):
        services.db.set_membership(participant_id, None, actor=f"analyst:{admin.name}")
        authenticator.set_membership(participant_id, None)
        _log.info("admin %s revoked participant %s", admin.name, participant_id)
    elif participant_id not in services.db.memberships():  # not revoked before either
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"participant {participant_id!r} is not a member"
        )
    try:
        services.counting.revoke_member(participant_id)
    except CountingError as exc:
        raise HTTPException(
            status.HTTP_502_BAD_GATEWAY,
            f"participant {participant_id!r} is revoked at the coordinator, but {exc}; "
            "repeat the revocation",
        ) from None
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/admin/audit",
    response_model=list[AdminEvent],
    operation_id="list_admin_events",
    tags=["admin"],
    summary="The admin trail: invitations, joins and revocations (admin)",
    responses=error_responses(401, 403),
)
def list_admin_events(admin: Admin, services: ServicesDep) -> list[AdminEvent]:
    """Every membership change, oldest first: who, what, which participant, when."""
    return [_event(r) for r in services.db.admin_events()]
