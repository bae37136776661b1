"""Per-route body limits of the coordinator (``infra.body_limit``).

Small messages get small limits, so a caller cannot make the coordinator buffer megabytes
where a few hundred bytes are expected; contributions keep ``MAX_BODY_BYTES`` (the largest
array, base64).
"""

from __future__ import annotations

from typing import Final

from fedclust.infra.body_limit import RouteLimit

__all__ = ["BODY_LIMITS", "PUBLIC_BODIES"]

_KIB: Final = 1024
_MIB: Final = 1024 * _KIB

BODY_LIMITS: Final[tuple[RouteLimit, ...]] = (
    ("POST", r"/api/v1/participants/enrol", 64 * _KIB),
    ("POST", r"/api/v1/participants/join", 4 * _KIB),
    ("POST", r"/api/v1/admin/invitations", 4 * _KIB),
    ("POST", r"/api/v1/audit/heads", 16 * _KIB),
    ("POST", r"/api/v1/jobs/[^/]+/cancel", 16 * _KIB),
    # A "fed-distill" job carries its public set (distill.public), hence more than a spec.
    ("POST", r"/api/v1/jobs", 32 * _MIB),
)

#: Routes that take a body without a bearer token: redeeming an invitation (the invite is
#: the credential), under its 4 KiB limit above.
PUBLIC_BODIES: Final[tuple[tuple[str, str], ...]] = (("POST", r"/api/v1/participants/join"),)
