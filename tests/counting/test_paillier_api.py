"""The counting service's Paillier routes over HTTP: roles, the decryption rule, persistence."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from fedclust.coordinator.counting_client import (
    CountingClient,
    CountingError,
    DecryptionRefusedError,
)
from fedclust.counting.app import create_app
from fedclust.counting.settings import CountingSettings, ParticipantCredential
from fedclust.crypto.paillier import SlotSpec, add, encrypt_vector
from fedclust.crypto.tokens import token_sha256
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.secure import public_key_of
from tests.counting.asgi import SyncASGITransport

COORDINATOR = "coordinator-token"
TOKENS = {f"p{i}": f"participant-token-{i}" for i in range(5)}
ROSTER = ["p0", "p1", "p2", "p3"]  # p4 is enrolled but not on the job's roster
JOB = "job-p"
SPEC = SlotSpec("total", scale_bits=16, bound=1000.0, max_parties=4)
VALUES = {p: np.array([[1.0 + i, -3.5], [250.25, 0.0]]) for i, p in enumerate(TOKENS)}
# 1024-bit keys keep the tests fast (one encryption ~5 ms instead of ~45 ms at 2048 bits);
# the routes and the decryption rule do not depend on the modulus size.
BITS = 1024


def settings_for(db: Path) -> CountingSettings:
    return CountingSettings(
        coordinator_token_sha256=token_sha256(COORDINATOR),
        participants=tuple(
            ParticipantCredential(id=p, token_sha256=token_sha256(t)) for p, t in TOKENS.items()
        ),
        database_url=f"sqlite:///{db}",
        paillier_bits=BITS,
    )


class Service:
    def __init__(self, db: Path) -> None:
        self.app = create_app(settings_for(db))
        self.transport = SyncASGITransport(self.app)

    def as_(self, token: str | None) -> httpx.Client:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.Client(
            base_url="http://counting/api/v1", transport=self.transport, headers=headers
        )

    def coordinator(self) -> CountingClient:
        return CountingClient("http://counting", COORDINATOR, transport=self.transport)

    def close(self) -> None:
        self.app.state.store.close()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    s = Service(tmp_path / "counting.db")
    r = s.as_(COORDINATOR).put(f"/jobs/{JOB}/roster", json={"job_id": JOB, "participants": ROSTER})
    assert r.status_code == 204
    yield s
    s.close()


def contribute(
    s: Service, who: str, round_no: int = 1, admitted: list[str] = ROSTER
) -> httpx.Response:
    return s.as_(TOKENS[who]).post(
        f"/jobs/{JOB}/paillier/contributions",
        json={"job_id": JOB, "round": round_no, "roster": admitted},
    )


def aggregate(
    s: Service, who: list[str], round_no: int = 1, contributors: list[str] | None = None
) -> msg.PaillierDecryptRequest:
    """Each of ``who`` fetches the key, announces, encrypts; the sum of their ciphertexts."""
    vectors = []
    for p in who:
        key = msg.PaillierKey.model_validate(
            s.as_(TOKENS[p]).get(f"/jobs/{JOB}/paillier-key").json()
        )
        assert contribute(s, p, round_no).status_code == 202
        vectors.append(encrypt_vector(public_key_of(key), VALUES[p], SPEC))
    return msg.PaillierDecryptRequest(
        job_id=JOB, round=round_no, contributors=contributors or who,
        vectors={"total": msg.EncryptedField.model_validate(add(vectors).to_dict())},
    )


ROUTES = [
    ("GET", f"/jobs/{JOB}/paillier-key", None),
    ("POST", f"/jobs/{JOB}/paillier/contributions", {"job_id": JOB, "round": 1, "roster": ROSTER}),
    ("POST", f"/jobs/{JOB}/paillier/decrypt", {}),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=["key", "contribute", "decrypt"])
def test_every_paillier_route_needs_a_known_token(
    service: Service, method: str, path: str, body: object
) -> None:
    for token in (None, "not-a-token"):
        r = service.as_(token).request(method, path, json=body)
        assert r.status_code == 401, (token, r.text)


def test_roles_and_rosters_are_enforced(service: Service) -> None:
    # The coordinator may not announce a contribution; a participant may not decrypt.
    r = service.as_(COORDINATOR).post(
        f"/jobs/{JOB}/paillier/contributions", json={"job_id": JOB, "round": 1, "roster": ROSTER}
    )
    assert r.status_code == 403
    request = aggregate(service, ["p0", "p1", "p2"])
    r = service.as_(TOKENS["p0"]).post(
        f"/jobs/{JOB}/paillier/decrypt", json=request.model_dump(mode="json")
    )
    assert r.status_code == 403
    # An enrolled participant off the job's roster gets neither the key nor a record.
    assert service.as_(TOKENS["p4"]).get(f"/jobs/{JOB}/paillier-key").status_code == 403
    r = contribute(service, "p4")
    assert r.status_code == 403 and "not on the roster" in r.json()["detail"]
    # No roster, no key; a body for another job is refused.
    assert service.as_(COORDINATOR).get("/jobs/other/paillier-key").status_code == 404
    r = service.as_(TOKENS["p0"]).post(
        f"/jobs/{JOB}/paillier/contributions",
        json={"job_id": "other", "round": 1, "roster": ROSTER},
    )
    assert r.status_code == 422


def test_coordinator_and_participants_see_the_same_key(service: Service) -> None:
    coordinator = service.coordinator()
    key = coordinator.paillier_key(JOB)
    assert all(
        service.as_(TOKENS[p]).get(f"/jobs/{JOB}/paillier-key").json() == key.model_dump()
        for p in ROSTER
    )
    assert set(msg.PaillierKey.model_fields) == {"n", "key_sha256"}  # nothing private travels


def test_decrypts_a_recorded_round_once(service: Service) -> None:
    coordinator = service.coordinator()
    who = ["p0", "p2", "p3"]
    request = aggregate(service, who)
    result = coordinator.paillier_decrypt(request)
    expected = sum(VALUES[p] for p in who)
    # 3 contributions rounded to 2^-16 each: within 3·2^-17 (SlotSpec.error_bound).
    assert np.abs(result.sums["total"].to_numpy() - expected).max() <= SPEC.error_bound(3)
    # The very same request again (a coordinator resumed after a crash): the same answer.
    assert coordinator.paillier_decrypt(request) == result
    # Any other aggregate of the round (here the same values encrypted afresh): refused, so
    # no two different decryptions of one round can be differenced.
    vectors = [encrypt_vector(public_key_of(coordinator.paillier_key(JOB)), VALUES[p], SPEC)
               for p in who]
    other = request.model_copy(update={
        "vectors": {"total": msg.EncryptedField.model_validate(add(vectors).to_dict())}
    })
    with pytest.raises(DecryptionRefusedError, match="decrypted already"):
        coordinator.paillier_decrypt(other)
    assert contribute(service, "p1").status_code == 409  # the round is closed


def test_refusals_are_409_with_the_reason(service: Service) -> None:
    coordinator = service.coordinator()
    with pytest.raises(DecryptionRefusedError, match="below the minimum cohort"):
        coordinator.paillier_decrypt(aggregate(service, ["p0", "p1"]))
    request = aggregate(service, ["p0", "p1", "p2"], round_no=2, contributors=["p0", "p1", "p3"])
    with pytest.raises(DecryptionRefusedError, match="named but not recorded"):
        coordinator.paillier_decrypt(request)
    assert issubclass(DecryptionRefusedError, CountingError)


def test_the_key_survives_a_restart_and_the_private_key_is_never_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    first = Service(tmp_path / "counting.db")
    first.as_(COORDINATOR).put(f"/jobs/{JOB}/roster", json={"job_id": JOB, "participants": ROSTER})
    request = aggregate(first, ["p0", "p1", "p2"])
    key = first.coordinator().paillier_key(JOB)
    p, q = first.app.state.store.paillier_key(JOB)
    first.close()
    second = Service(tmp_path / "counting.db")
    assert second.coordinator().paillier_key(JOB) == key
    result = second.coordinator().paillier_decrypt(request)  # records survived too
    assert result.round == 1
    second.close()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "decrypted" in logged and str(p) not in logged and str(q) not in logged


def test_a_round_is_decrypted_only_within_every_contributors_admitted_roster(
    service: Service,
) -> None:
    """Issue 20, members the coordinator invents, for Paillier: p0 admitted the job's roster
    p0..p3; the coordinator then swaps the roster here for [p0, p3, p4] (p3 and p4 its
    own) so that the round would sum p0 with them. p0's contribution is refused once the
    roster is not within what it admitted, and a round it contributed to before the swap is
    not decrypted over the others' roster."""
    coordinator = service.coordinator()
    key = public_key_of(coordinator.paillier_key(JOB))
    assert contribute(service, "p0").status_code == 202  # admitted ROSTER, the roster here
    swapped = ["p0", "p3", "p4"]
    body = {"job_id": JOB, "participants": swapped}
    assert service.as_(COORDINATOR).put(f"/jobs/{JOB}/roster", json=body).status_code == 204
    refused = contribute(service, "p0", round_no=2)
    assert refused.status_code == 409
    assert "is not within the roster participant 'p0' admitted" in refused.json()["detail"]
    for p in ("p3", "p4"):
        assert contribute(service, p, admitted=swapped).status_code == 202
    vectors = [encrypt_vector(key, VALUES[p], SPEC) for p in swapped]
    request = msg.PaillierDecryptRequest(
        job_id=JOB, round=1, contributors=swapped,
        vectors={"total": msg.EncryptedField.model_validate(add(vectors).to_dict())},
    )
    with pytest.raises(DecryptionRefusedError, match="roster participant 'p0' admitted"):
        coordinator.paillier_decrypt(request)
