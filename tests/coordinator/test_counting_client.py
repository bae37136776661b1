"""The coordinator's counting-service client against a mock transport."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from fedclust.coordinator.counting_client import CountingClient, CountingError
from fedclust.protocol.wire.messages import PaillierDecryptRequest


def client_for(
    handler: Callable[[httpx.Request], httpx.Response], outage_seconds: float = 0.3
) -> CountingClient:
    return CountingClient(
        "http://counting.test/", "tok", transport=httpx.MockTransport(handler),
        retry_delay=0.01, outage_seconds=outage_seconds,
    )


def test_roster_and_total_carry_the_token() -> None:
    seen: list[tuple[str, str, str | None, bytes]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, request.headers.get("Authorization"),
                     request.content))
        if request.method == "PUT":
            return httpx.Response(204)
        return httpx.Response(200, json={"job_id": "job-1", "total": 42, "reporters": 3})

    client = client_for(handler)
    client.put_roster("job-1", ["a", "b", "c"])
    assert client.total("job-1") == 42
    assert [(m, p, a) for m, p, a, _ in seen] == [
        ("PUT", "/api/v1/jobs/job-1/roster", "Bearer tok"),
        ("GET", "/api/v1/jobs/job-1/total", "Bearer tok"),
    ]
    assert json.loads(seen[0][3]) == {
        "protocol_version": 4, "job_id": "job-1", "participants": ["a", "b", "c"]
    }


def test_not_enough_reporters_is_a_clear_error() -> None:
    client = client_for(
        lambda _: httpx.Response(409, json={"detail": "only 2 of min 3 participants have reported"})
    )
    with pytest.raises(CountingError, match=r"has not released the total of job 'j'.*only 2 of"):
        client.total("j")


def test_refused_roster_names_the_reason() -> None:
    detail = [{"loc": ["body", "participants"], "msg": "roster too small", "type": "value_error"}]
    client = client_for(lambda _: httpx.Response(422, json={"detail": detail}))
    with pytest.raises(CountingError, match="HTTP 422 roster too small"):
        client.put_roster("j", ["a"])


def test_malformed_total_and_unreachable_service() -> None:
    client = client_for(lambda _: httpx.Response(200, json={"total": -1}))
    with pytest.raises(CountingError, match="malformed total"):
        client.total("j")
    calls: list[httpx.Request] = []

    def down(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(CountingError) as info:
        client_for(down).total("j")
    assert str(info.value) == (
        "the counting service at http://counting.test cannot be reached (ConnectError; "
        "retried for 0.3 s)"
    )
    assert len(calls) >= 3  # retried with backoff until the outage budget ran out


def test_an_outage_is_waited_out() -> None:
    """A counting service restarting (no connection, then 503) or busy with the coordinator's
    other large bodies (429) is retried with backoff."""
    answers = [None, None, httpx.Response(503), httpx.Response(429)]

    def restarting(request: httpx.Request) -> httpx.Response:
        if answers:
            answer = answers.pop(0)
            if answer is None:
                raise httpx.ConnectError("refused", request=request)
            return answer
        return httpx.Response(200, json={"job_id": "j", "total": 42, "reporters": 3})

    assert client_for(restarting, outage_seconds=30).total("j") == 42
    assert not answers


def test_a_decryption_lost_mid_request_is_sent_again_unchanged() -> None:
    """The key holder answers the very same decryption request again, so a connection lost
    after the request went out (the service killed while decrypting) is retried."""
    bodies: list[bytes] = []
    request = PaillierDecryptRequest.model_construct(  # its vectors do not matter here
        job_id="j", round=1, contributors=["a", "b", "c"], vectors={}
    )
    answer = {"job_id": "j", "round": 1, "sums": {}}

    def killed_once(sent: httpx.Request) -> httpx.Response:
        bodies.append(sent.content)
        if len(bodies) == 1:
            raise httpx.RemoteProtocolError("server disconnected", request=sent)
        return httpx.Response(200, json=answer)

    decryption = client_for(killed_once, outage_seconds=30).paillier_decrypt(request)
    assert (decryption.job_id, decryption.round) == ("j", 1)
    assert len(bodies) == 2 and bodies[0] == bodies[1]
