"""The coordinator's client of the counting service: roster in, ΣN_l out (never an N_l).

It also fetches a job's Paillier public key and asks for the decryption of a Paillier
aggregate (the service holds the private key; :mod:`counting.keyholder`), and passes on
membership changes: a joined member's token SHA-256, a revocation.

``transport`` is the seam for tests (``httpx.MockTransport``) and the in-process mode;
by default requests go over the network to ``base_url``, verified by ``verify`` (httpx's:
an :class:`ssl.SSLContext` from the coordinator's ``[tls]``, see :mod:`infra.tls`).
"""

from __future__ import annotations

import logging
import ssl
from typing import NoReturn

import httpx
from pydantic import ValidationError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_before_delay,
    wait_exponential,
    wait_random_exponential,
)

from fedclust.core.errors import RefusedError
from fedclust.protocol.wire.admin import MemberToken
from fedclust.protocol.wire.messages import (
    CountRoster,
    CountTotal,
    PaillierDecryption,
    PaillierDecryptRequest,
    PaillierKey,
)

__all__ = ["CountingClient", "CountingError", "DecryptionRefusedError"]

_RETRY_MAX = 10.0  # s between attempts at most
_ADMIN_OUTAGE = 5.0  # s: an admin's request waits out a short outage only
_UNAVAILABLE = frozenset({429, 502, 503, 504})  # busy (its uploads in flight), a proxy, a restart
_log = logging.getLogger("fedclust.coordinator")


class CountingError(Exception):
    """The counting service refused or could not be reached."""


class DecryptionRefusedError(CountingError, RefusedError):
    """The key holder's decryption rule refused a Paillier aggregate (HTTP 409)."""


class CountingClient:
    """``PUT /jobs/{id}/roster`` and ``GET /jobs/{id}/total`` with the coordinator's token.

    An outage of the service (no connection, a connection lost mid-request, or 502/503/504)
    or its 429 (the coordinator's large bodies in flight, ``infra.body_limit``) is waited
    out for up to ``outage_seconds``, retrying with jittered exponential backoff from
    ``retry_delay`` (at most 10 s apart), so a restarting counting service does not fail
    the jobs that need it. Every request is safe to repeat: rosters and credentials are PUT,
    and the key holder answers the very same decryption request again (nothing new).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
        retry_delay: float = 0.5,
        outage_seconds: float = 120.0,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._retry_delay = retry_delay
        self._outage = outage_seconds
        self._client = httpx.Client(
            base_url=self._base + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            transport=transport,
            timeout=timeout,
            verify=verify,
        )

    def close(self) -> None:
        self._client.close()

    def _request(
        self, method: str, path: str, *, json: object = None, outage: float | None = None
    ) -> httpx.Response:
        outage = self._outage if outage is None else outage

        def log_retry(state: RetryCallState) -> None:
            _log.warning(
                "the counting service at %s: %s %s failed (%s); retrying in %.1f s",
                self._base, method, path, _problem(state), state.upcoming_sleep,
            )

        def unreachable(state: RetryCallState) -> NoReturn:
            raise CountingError(
                f"the counting service at {self._base} cannot be reached ({_problem(state)}; "
                f"retried for {outage:g} s)"
            )

        # Half of the doubling delay d fixed plus up to half at random, d·U(½, 1); no retry
        # whose wait would end past the outage budget.
        half_initial, half_max = self._retry_delay / 2, _RETRY_MAX / 2
        retrying = Retrying(
            stop=stop_before_delay(outage),
            wait=wait_exponential(multiplier=half_initial, max=half_max)
            + wait_random_exponential(multiplier=half_initial, max=half_max),
            retry=retry_if_exception_type(httpx.TransportError)
            | retry_if_result(lambda r: r.status_code in _UNAVAILABLE),
            before_sleep=log_retry,
            retry_error_callback=unreachable,
        )
        return retrying(self._client.request, method, path, json=json)

    def check_health(self) -> None:
        """Ask ``GET /health`` once (no retries: a readiness probe asks again); raise
        CountingError unless it answers 200."""
        try:
            response = self._client.get("/health", timeout=5.0)
        except httpx.TransportError as exc:
            raise CountingError(
                f"the counting service at {self._base} cannot be reached ({type(exc).__name__})"
            ) from None
        if response.status_code != 200:
            raise CountingError(
                f"the counting service's health check answered HTTP {response.status_code}"
            )

    def put_roster(self, job_id: str, participants: list[str]) -> None:
        """Tell the counting service who takes part in ``job_id`` (idempotent)."""
        roster = CountRoster(job_id=job_id, participants=participants)
        response = self._request(
            "PUT", f"/jobs/{job_id}/roster", json=roster.model_dump(mode="json")
        )
        if response.status_code not in (200, 201, 204):
            raise CountingError(
                f"the counting service refused the roster of job {job_id!r}: "
                f"HTTP {response.status_code} {_detail(response)}"
            )

    def put_member(self, participant_id: str, token_sha256: str) -> bool:
        """Ask the counting service to accept a member's new token (by its SHA-256);
        idempotent. True when it is in force, False while it awaits the counting operator's
        approval (``fedclust counter members approve``)."""
        response = self._request(
            "PUT", f"/participants/{participant_id}",
            json=MemberToken(token_sha256=token_sha256).model_dump(mode="json"),
            outage=_ADMIN_OUTAGE,
        )
        if response.status_code == 202:
            return False
        if response.status_code not in (200, 201, 204):
            raise CountingError(
                f"the counting service refused the credential of participant "
                f"{participant_id!r}: HTTP {response.status_code} {_detail(response)}"
            )
        return True

    def revoke_member(self, participant_id: str) -> None:
        """Tell the counting service to refuse ``participant_id``'s tokens; idempotent."""
        response = self._request(
            "DELETE", f"/participants/{participant_id}", outage=_ADMIN_OUTAGE
        )
        if response.status_code not in (200, 204):
            raise CountingError(
                f"the counting service refused to revoke participant {participant_id!r}: "
                f"HTTP {response.status_code} {_detail(response)}"
            )

    def total(self, job_id: str) -> int:
        """ΣN_l of ``job_id``; a clear error while too few participants have reported."""
        response = self._request("GET", f"/jobs/{job_id}/total")
        if response.status_code == 409:
            raise CountingError(
                f"the counting service has not released the total of job {job_id!r}: "
                f"{_detail(response)}"
            )
        if response.status_code != 200:
            raise CountingError(
                f"the counting service refused the total of job {job_id!r}: "
                f"HTTP {response.status_code} {_detail(response)}"
            )
        try:
            return CountTotal.model_validate_json(response.content).total
        except ValidationError:
            raise CountingError(
                f"the counting service sent a malformed total for job {job_id!r}"
            ) from None

    def paillier_key(self, job_id: str) -> PaillierKey:
        """The Paillier public key of ``job_id`` (the service generates it on first request)."""
        response = self._request("GET", f"/jobs/{job_id}/paillier-key")
        if response.status_code != 200:
            raise CountingError(
                f"the counting service refused the Paillier key of job {job_id!r}: "
                f"HTTP {response.status_code} {_detail(response)}"
            )
        try:
            return PaillierKey.model_validate_json(response.content)
        except ValidationError:
            raise CountingError(
                f"the counting service sent a malformed Paillier key for job {job_id!r}"
            ) from None

    def paillier_decrypt(self, request: PaillierDecryptRequest) -> PaillierDecryption:
        """The decoded sums of one Paillier aggregate; DecryptionRefusedError on a refusal."""
        job, r = request.job_id, request.round
        response = self._request(
            "POST", f"/jobs/{job}/paillier/decrypt", json=request.model_dump(mode="json")
        )
        if response.status_code == 409:
            raise DecryptionRefusedError(
                f"the counting service refused to decrypt Paillier round {r} of job {job!r}: "
                f"{_detail(response)}"
            )
        if response.status_code != 200:
            raise CountingError(
                f"the counting service refused to decrypt Paillier round {r} of job {job!r}: "
                f"HTTP {response.status_code} {_detail(response)}"
            )
        try:
            decryption = PaillierDecryption.model_validate_json(response.content)
        except ValidationError:
            raise CountingError(
                f"the counting service sent a malformed decryption for job {job!r}"
            ) from None
        if decryption.job_id != job or decryption.round != r:
            raise CountingError(
                f"the counting service answered Paillier round {r} of job {job!r} with "
                f"round {decryption.round} of job {decryption.job_id!r}"
            )
        return decryption


def _problem(state: RetryCallState) -> str:
    """What failed in a request's last attempt: the network error's type or the HTTP status."""
    assert state.outcome is not None
    exc = state.outcome.exception()
    if exc is None:
        return f"HTTP {state.outcome.result().status_code}"
    return type(exc).__name__


def _detail(response: httpx.Response) -> str:
    """The ``detail`` of an error response, shortened."""
    try:
        detail = response.json().get("detail", "")
    except (ValueError, AttributeError):
        detail = response.text
    if isinstance(detail, list):  # a 422: [{loc, msg, type}, ...]
        detail = "; ".join(str(item.get("msg", item)) for item in detail if isinstance(item, dict))
    return str(detail)[:500]
