"""The Paillier key holder's decryption rule: whole recorded rounds of >= 3, once, own key."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from fedclust.core.errors import RefusedError
from fedclust.counting.db import CountingStore
from fedclust.counting.keyholder import (
    DecryptionRefusedError,
    MemoryPaillierStore,
    NotAdmittedError,
    NotOnRosterError,
    PaillierKeyHolder,
    RoundClosedError,
    UnknownJobError,
)
from fedclust.crypto.paillier import EncryptedVector, PaillierKeyPair, SlotSpec, add, encrypt_vector
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.secure import public_key_of

JOB = "job-k"
ROSTER = ("p0", "p1", "p2", "p3")
SPEC = SlotSpec("total", scale_bits=20, bound=100.0, max_parties=4)
VALUES = {p: np.array([1.5 * i, -2.0, 10.0 + i]) for i, p in enumerate(ROSTER)}

# 1024-bit keys keep the tests fast: one encryption costs ~5 ms instead of ~45 ms at 2048
# bits (measured with gmpy2), and the decryption rule under test does not depend on the
# modulus size.
BITS = 1024


@pytest.fixture(scope="module")
def pair() -> PaillierKeyPair:
    return PaillierKeyPair.generate(BITS)


@pytest.fixture
def holder(pair: PaillierKeyPair) -> PaillierKeyHolder:
    store = MemoryPaillierStore.with_rosters({JOB: ROSTER})
    store.add_paillier_key(JOB, int(pair.private_key.p), int(pair.private_key.q))
    return PaillierKeyHolder(store, bits=BITS)


def contribution(holder: PaillierKeyHolder, who: str) -> EncryptedVector:
    return encrypt_vector(public_key_of(holder.public_key(JOB)), VALUES[who], SPEC)


def request(
    holder: PaillierKeyHolder,
    contributors: Sequence[str],
    *,
    summed: Sequence[str] | None = None,
    round_no: int = 1,
) -> msg.PaillierDecryptRequest:
    """A decryption request naming ``contributors`` for the sum of ``summed`` (default: same)."""
    vectors = [contribution(holder, p) for p in (summed or contributors)]
    total = add(vectors) if len(vectors) > 1 else vectors[0]
    return msg.PaillierDecryptRequest(
        job_id=JOB, round=round_no, contributors=list(contributors),
        vectors={"total": msg.EncryptedField.model_validate(total.to_dict())},
    )


def announce(holder: PaillierKeyHolder, who: Sequence[str], round_no: int = 1) -> None:
    for p in who:
        holder.record_contribution(JOB, round_no, p)


def test_decrypts_a_recorded_round_of_three_within_the_encoding_bound(
    holder: PaillierKeyHolder,
) -> None:
    who = ["p0", "p1", "p3"]
    announce(holder, who)
    announce(holder, ["p1"])  # idempotent: announcing twice changes nothing
    result = holder.decrypt(request(holder, who))
    got = result.sums["total"].to_numpy()
    expected = sum(VALUES[p] for p in who)
    # 3 contributions rounded to 2^-20 each: the sum is within 3·2^-21 (SlotSpec.error_bound).
    assert np.abs(got - expected).max() <= SPEC.error_bound(3)
    assert (result.job_id, result.round) == (JOB, 1)


def test_refuses_fewer_than_the_minimum_cohort(holder: PaillierKeyHolder) -> None:
    announce(holder, ["p0", "p1"])
    with pytest.raises(DecryptionRefusedError, match="below the minimum cohort of 3"):
        holder.decrypt(request(holder, ["p0", "p1"]))


def test_refuses_contributors_that_differ_from_the_records(holder: PaillierKeyHolder) -> None:
    announce(holder, ["p0", "p1", "p2", "p3"])
    # p3 announced but the coordinator leaves it out (its ciphertext could be decrypted
    # later by difference otherwise): refused, naming who is missing.
    with pytest.raises(DecryptionRefusedError, match=r"recorded but not named: \['p3'\]"):
        holder.decrypt(request(holder, ["p0", "p1", "p2"]))
    # The refused request did not close the round: the whole recorded set still decrypts.
    result = holder.decrypt(request(holder, ROSTER))
    expected = sum(VALUES.values())
    assert np.abs(result.sums["total"].to_numpy() - expected).max() <= SPEC.error_bound(4)


def test_refuses_a_contributor_that_never_announced(holder: PaillierKeyHolder) -> None:
    announce(holder, ["p0", "p1", "p2"], round_no=2)
    with pytest.raises(DecryptionRefusedError, match=r"named but not recorded: \['p3'\]"):
        holder.decrypt(request(holder, ["p0", "p1", "p2", "p3"], round_no=2))


def test_each_round_decrypts_once_and_closes(holder: PaillierKeyHolder) -> None:
    announce(holder, ["p0", "p1", "p2"])
    first = request(holder, ["p0", "p1", "p2"])
    decrypted = holder.decrypt(first)
    assert holder.decrypt(first) == decrypted  # the very same request: the same answer
    # Another aggregate, even of the same contributors: no second look at a round.
    with pytest.raises(RoundClosedError, match="decrypted already"):
        holder.decrypt(request(holder, ["p0", "p1", "p2"]))
    with pytest.raises(RoundClosedError):
        holder.record_contribution(JOB, 1, "p3")
    # The next round is independent.
    announce(holder, ["p0", "p1", "p2"], round_no=2)
    holder.decrypt(request(holder, ["p0", "p1", "p2"], round_no=2))


def test_a_round_over_the_survivors_of_a_dropout_is_refused(holder: PaillierKeyHolder) -> None:
    """The dropout attack of issue 20: a round over everyone, then (p3 forced out by a
    withheld task) one over the others; their FedFuzzDB memberships would give N_p3 by
    difference. Two cohorts differing by two (e_p0 - e_p3) are refused as well."""
    announce(holder, ROSTER)
    holder.decrypt(request(holder, ROSTER))
    survivors = ["p0", "p1", "p2"]
    announce(holder, survivors, round_no=2)
    with pytest.raises(DecryptionRefusedError, match=r"fewer than 3 participants derivable \(p3\)"):
        holder.decrypt(request(holder, survivors, round_no=2))
    with pytest.raises(DecryptionRefusedError, match="refusing to decrypt, now and later"):
        holder.decrypt(request(holder, survivors, round_no=2))  # the round stays refused
    swapped = ["p1", "p2", "p3"]
    announce(holder, swapped, round_no=3)
    with pytest.raises(DecryptionRefusedError, match=r"\(p0\)"):
        holder.decrypt(request(holder, swapped, round_no=3))
    announce(holder, ROSTER, round_no=4)  # the same cohort again is fine
    holder.decrypt(request(holder, ROSTER, round_no=4))


def test_refuses_an_aggregate_under_another_key(holder: PaillierKeyHolder) -> None:
    announce(holder, ["p0", "p1", "p2"])
    other = PaillierKeyPair.generate(BITS).public_key
    total = add([encrypt_vector(other, VALUES[p], SPEC) for p in ("p0", "p1", "p2")])
    forged = msg.PaillierDecryptRequest(
        job_id=JOB, round=1, contributors=["p0", "p1", "p2"],
        vectors={"total": msg.EncryptedField.model_validate(total.to_dict())},
    )
    with pytest.raises(DecryptionRefusedError, match="another key"):
        holder.decrypt(forged)


def test_refuses_a_count_that_disagrees_with_the_contributors(
    holder: PaillierKeyHolder,
) -> None:
    announce(holder, ROSTER)
    with pytest.raises(DecryptionRefusedError, match="claims 3 contributions but 4"):
        holder.decrypt(request(holder, ROSTER, summed=["p0", "p1", "p2"]))


def test_one_ciphertext_passed_off_as_an_aggregate_is_not_decrypted(
    holder: PaillierKeyHolder,
) -> None:
    announce(holder, ["p0", "p1", "p2"])
    single = contribution(holder, "p0").to_dict() | {"n_contributions": 3}
    forged = msg.PaillierDecryptRequest(
        job_id=JOB, round=1, contributors=["p0", "p1", "p2"],
        vectors={"total": msg.EncryptedField.model_validate(single)},
    )
    # The counter slots say 1 contribution, not 3: refused (crypto.paillier.Packing.unpack).
    with pytest.raises(DecryptionRefusedError, match="not a sum of 3 contributions"):
        holder.decrypt(forged)


def test_only_roster_participants_contribute(holder: PaillierKeyHolder) -> None:
    with pytest.raises(NotOnRosterError, match="'intruder' is not on the roster"):
        holder.record_contribution(JOB, 1, "intruder")
    with pytest.raises(UnknownJobError):
        holder.public_key("no-such-job")
    assert issubclass(DecryptionRefusedError, RefusedError)


def test_the_store_keeps_the_key_and_the_records(database_url: str) -> None:
    """The private primes and the round records survive a restart (SQLite and PostgreSQL)."""
    url = database_url
    store = CountingStore(url)
    store.put_roster(JOB, list(ROSTER))
    first = PaillierKeyHolder(store, bits=BITS)
    key = first.public_key(JOB)
    announce(first, ["p0", "p1", "p2"])
    store.close()
    reopened = CountingStore(url)  # a restarted service: same key, same records
    second = PaillierKeyHolder(reopened, bits=BITS)
    assert second.public_key(JOB) == key
    result = second.decrypt(request(second, ["p0", "p1", "p2"]))
    expected = sum(VALUES[p] for p in ("p0", "p1", "p2"))
    assert np.abs(result.sums["total"].to_numpy() - expected).max() <= SPEC.error_bound(3)
    with pytest.raises(RoundClosedError):
        PaillierKeyHolder(reopened, bits=BITS).decrypt(request(second, ["p0", "p1", "p2"]))
    reopened.close()



def test_a_round_lies_within_every_contributors_admitted_roster(pair: PaillierKeyPair) -> None:
    """Members the coordinator invents (issue 20): p0 admitted [p0, p1, p2]. Its
    contribution is refused while the job's roster here is not within that; once it was
    recorded, the roster swapped for [p0, p1, p3] and p1, p3 recorded under it, the round
    summing p0 with p3 is not decrypted."""
    store = MemoryPaillierStore.with_rosters({JOB: ROSTER})
    store.add_paillier_key(JOB, int(pair.private_key.p), int(pair.private_key.q))
    holder = PaillierKeyHolder(store, bits=BITS)
    admitted = ["p0", "p1", "p2"]
    with pytest.raises(NotAdmittedError, match="not within the roster participant 'p0'"):
        holder.record_contribution(JOB, 1, "p0", admitted)
    store.put_roster(JOB, admitted)
    holder.record_contribution(JOB, 1, "p0", admitted)
    swapped = ["p0", "p1", "p3"]
    store.put_roster(JOB, swapped)
    for p in ("p1", "p3"):
        holder.record_contribution(JOB, 1, p, swapped)
    with pytest.raises(DecryptionRefusedError, match="roster participant 'p0' admitted"):
        holder.decrypt(request(holder, swapped))
