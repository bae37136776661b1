"""Paillier secure sums through the round drivers: exactness, who holds what, refusals."""

from __future__ import annotations

import functools
import gc
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from phe.paillier import PaillierPrivateKey

from fedclust.coordinator.exact_fcm import run_exact_fcm
from fedclust.coordinator.paillier_sum import JobKeyHolder, PaillierSummation
from fedclust.coordinator.secure_sum import field_encodings
from fedclust.core.errors import RefusedError, UnavailableError
from fedclust.counting.keyholder import MemoryPaillierStore, PaillierKeyHolder
from fedclust.crypto.paillier import PaillierKeyPair, SlotSpec
from fedclust.participant.dispatch import OVER_BOUND_REASON
from fedclust.participant.local import LocalParticipant
from fedclust.participant.paillier_input import PaillierSession
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.secure import paillier_key_message

JOB = "job-paillier"
MAX_ROWS, VALUE_BOUND = 10**6, 1e3
CENTERS = np.array([[0.0, 0.0, 0.0], [2.0, 2.0, 2.0], [5.0, 5.0, 5.0]])
# 1024-bit keys keep the tests fast (one encryption ~5 ms instead of ~45 ms at 2048 bits);
# packing, the decryption rule and the checks do not depend on the modulus size.
BITS = 1024


@pytest.fixture(scope="module")
def pair() -> PaillierKeyPair:
    return PaillierKeyPair.generate(BITS)


class Member:
    """An in-process participant whose Paillier stage goes to its :class:`PaillierSession`
    after the policy check (what ``participant.dispatch.execute`` does for secure stages)."""

    def __init__(self, local: LocalParticipant, session: PaillierSession) -> None:
        self.local = local
        self.name = local.name
        self.session = session
        self.sent: list[msg.Reply] = []
        self.silent_after_announce = False

    @property
    def n_features(self) -> int:
        return self.local.n_features

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.local, attribute)

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        self.local.policy.require("ffcm")
        reply = self.session.handle(spec)
        if self.silent_after_announce:
            raise UnavailableError(f"{self.name} went silent")
        self.sent.append(reply)
        if isinstance(reply, msg.RefusalReply):
            raise RefusedError(reply.reason)
        return reply


class Recorder:
    """The coordinator's key holder: forwards to the counting service, records the requests."""

    def __init__(
        self, public_key: Callable[[], msg.PaillierKey], decrypt: Callable[..., Any]
    ) -> None:
        self._public_key = public_key
        self._decrypt = decrypt
        self.requests: list[msg.PaillierDecryptRequest] = []

    def public_key(self) -> msg.PaillierKey:
        return self._public_key()

    def decrypt(self, request: msg.PaillierDecryptRequest) -> msg.PaillierDecryption:
        self.requests.append(request)
        result: msg.PaillierDecryption = self._decrypt(request)
        return result


class Federation:
    def __init__(
        self, pair: PaillierKeyPair, n: int, *, rows: int = 300, tiny: int | None = None
    ) -> None:
        rng = np.random.default_rng(0)
        self.locals = [
            LocalParticipant(
                rng.normal(size=(4 if i == tiny else rows, 3)) + 2 * i, name=f"org-{i}"
            )
            for i in range(n)
        ]
        store = MemoryPaillierStore.with_rosters({JOB: [p.name for p in self.locals]})
        store.add_paillier_key(JOB, int(pair.private_key.p), int(pair.private_key.q))
        self.holder = PaillierKeyHolder(store, bits=BITS)  # the counting service
        self.announced: list[tuple[str, int]] = []
        self.members = [
            Member(
                p,
                PaillierSession(
                    p, participant_id=p.name, job_id=JOB,
                    announce=functools.partial(self._announce, p.name),
                    expected_key=lambda: self.holder.public_key(JOB),
                    min_key_bits=BITS,
                ),
            )
            for p in self.locals
        ]
        self.key_holder = Recorder(lambda: self.holder.public_key(JOB), self.holder.decrypt)
        self.summation = PaillierSummation(
            JOB, self.key_holder, max_rows=MAX_ROWS, value_bound=VALUE_BOUND
        )


    def _announce(self, name: str, round_no: int) -> None:
        self.announced.append((name, round_no))
        self.holder.record_contribution(JOB, round_no, name)


def fcm_task(centers: np.ndarray) -> msg.StatisticTask:
    return msg.StatisticTask.of("fcm_sums", centers, m=2.0)


def test_paillier_exact_fcm_equals_the_plaintext_run_to_the_encoding_bound(
    pair: PaillierKeyPair,
) -> None:
    fed = Federation(pair, 4)
    plain = run_exact_fcm(fed.locals, 3, init=CENTERS, eps=1e-6)
    secured = run_exact_fcm(fed.members, 3, init=CENTERS, eps=1e-6, summation=fed.summation)
    assert secured.n_rounds == plain.n_rounds
    # Per round the sums are exact to n·2^-(f+1) (f >= 27 here, relative 1e-8 of the sums);
    # the centers are ratios of such sums, and 1e-9 leaves orders of margin over the
    # observed ~1e-11 while any real disagreement (a missing or doubled term) is >= 1e-2.
    np.testing.assert_allclose(secured.centers, plain.centers, rtol=0, atol=1e-9)
    assert fed.summation.rounds == secured.n_rounds == len(fed.key_holder.requests)
    # The key holder only ever received aggregates of every contributor (>= 3), never one
    # participant's ciphertext.
    for request in fed.key_holder.requests:
        assert len(request.contributors) == 4
        assert all(v.n_contributions == 4 >= 3 for v in request.vectors.values())


def test_one_sum_decodes_within_the_bound_and_each_answer_is_ciphertext(
    pair: PaillierKeyPair,
) -> None:
    fed = Federation(pair, 3)
    total, names = fed.summation.sum(fed.members, fcm_task(CENTERS), msg.StatisticReply)
    assert names == ("org-0", "org-1", "org-2")
    plain = [p.statistic("fcm_sums", CENTERS, {"m": 2.0}) for p in fed.locals]
    (enc,) = [
        e for e in field_encodings(
            fcm_task(CENTERS), n_features=3, n_parties=3, max_rows=MAX_ROWS,
            value_bound=VALUE_BOUND,
        ) if e.name == "weighted_sum"
    ]
    bound = SlotSpec(enc.name, enc.scale_bits, enc.bound, 3).error_bound(3)
    expected = sum(p["weighted_sum"] for p in plain)
    got = total.fields["weighted_sum"].to_numpy()
    assert np.abs(got - expected).max() <= bound + 1e-12 * np.abs(expected).max()
    for member in fed.members:
        (reply,) = member.sent
        assert isinstance(reply, msg.PaillierInputReply)
        assert set(reply.vectors) == {"u_sum", "weighted_sum"}
        assert all(v.n_contributions == 1 for v in reply.vectors.values())


def _private_keys_reachable(root: object, boundary: object) -> list[object]:
    """Private-key objects reachable from ``root`` without passing through ``boundary``.

    Modules and a function's globals are not followed (through them everything in the
    process is reachable, the test's own fixtures included); a function's closure and
    defaults are.
    """
    seen, stack, found = {id(boundary)}, [root], []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | types.ModuleType):
            continue
        seen.add(id(obj))
        if isinstance(obj, PaillierPrivateKey | PaillierKeyPair | PaillierKeyHolder):
            found.append(obj)
            continue
        if isinstance(obj, types.FunctionType):
            stack.extend(obj.__defaults__ or ())
            stack.extend(c.cell_contents for c in obj.__closure__ or () if c.cell_contents)
            continue
        stack.extend(gc.get_referents(obj))
    return found


def test_the_coordinator_never_holds_the_private_key(pair: PaillierKeyPair) -> None:
    fed = Federation(pair, 3)
    fed.summation.sum(fed.members, fcm_task(CENTERS), msg.StatisticReply)
    # Everything the summation holds, up to the key holder (the counting service's side of
    # the wire): no private key, key pair or key holder is reachable.
    assert _private_keys_reachable(fed.summation, fed.key_holder) == []
    # The check can fail: from the counting service's side the private key is reachable.
    assert _private_keys_reachable(fed.holder, object()) != []


def test_a_substituted_public_key_is_refused(pair: PaillierKeyPair) -> None:
    fed = Federation(pair, 3)
    own = PaillierKeyPair.generate(BITS)  # the coordinator's own pair: it could decrypt
    fed.summation = PaillierSummation(
        JOB, JobKeyHolder(JOB, lambda _: paillier_key_message(own.public_key), fed.holder.decrypt),
        max_rows=MAX_ROWS, value_bound=VALUE_BOUND,
    )
    with pytest.raises(RefusedError, match="only 0 of 3 participants contributed"):
        fed.summation.sum(fed.members, fcm_task(CENTERS), msg.StatisticReply)
    for member in fed.members:
        (reply,) = member.sent
        assert isinstance(reply, msg.RefusalReply) and "substituted key" in reply.reason
    assert any("substituted key" in note for note in fed.summation.notes)


def test_a_participant_refusing_by_its_privacy_rule_is_left_out_and_noted(
    pair: PaillierKeyPair,
) -> None:
    # org-3 holds 4 rows: exact-sum FCM with K=3 in 3-D would let the coordinator solve for
    # its points (N <= K(D+1)/D), so its policy refuses (Corcuera Bárcena et al. §4.2).
    fed = Federation(pair, 4, tiny=3)
    total, names = fed.summation.sum(fed.members, fcm_task(CENTERS), msg.StatisticReply)
    assert names == ("org-0", "org-1", "org-2")
    expected = sum(p.statistic("fcm_sums", CENTERS, {"m": 2.0})["u_sum"] for p in fed.locals[:3])
    assert np.abs(total.fields["u_sum"].to_numpy() - expected).max() < 1e-6
    assert any(
        "'org-3' left a secure sum at the Paillier input of sum 1" in note
        for note in fed.summation.notes
    )
    (request,) = fed.key_holder.requests
    assert request.contributors == ["org-0", "org-1", "org-2"]
    with pytest.raises(RefusedError, match="org-3"):  # a sum every participant must join
        fed.summation.sum(fed.members, fcm_task(CENTERS), msg.StatisticReply, required=True)


def test_fewer_than_three_contributors_fail_before_any_decryption(pair: PaillierKeyPair) -> None:
    fed = Federation(pair, 3, tiny=2)
    with pytest.raises(RefusedError, match="only 2 of 3 participants contributed"):
        fed.summation.sum(fed.members, fcm_task(CENTERS), msg.StatisticReply)
    assert fed.key_holder.requests == []


def test_a_participant_silent_after_announcing_makes_the_key_holder_refuse(
    pair: PaillierKeyPair,
) -> None:
    fed = Federation(pair, 4)
    fed.members[1].silent_after_announce = True
    with pytest.raises(RefusedError, match=r"recorded but not named: \['org-1'\]"):
        fed.summation.sum(fed.members, fcm_task(CENTERS), msg.StatisticReply)


def test_replays_and_values_over_their_bound_are_refused(pair: PaillierKeyPair) -> None:
    fed = Federation(pair, 3)
    member = fed.members[0]
    encoding = field_encodings(
        fcm_task(CENTERS), n_features=3, n_parties=3, max_rows=MAX_ROWS, value_bound=VALUE_BOUND
    )
    task = msg.PaillierInputTask(
        round=1, statistic=fcm_task(CENTERS), encoding=encoding,
        public_key=fed.holder.public_key(JOB), max_parties=3,
    )
    first = member.session.handle(task)
    assert isinstance(first, msg.PaillierInputReply)
    # The very task again (a resumed coordinator): the same ciphertexts, nothing new.
    assert member.session.handle(task) == first
    # Another task of that round (here other centers): a replay, refused.
    other = task.model_copy(update={"statistic": fcm_task(CENTERS * 2)})
    replay = member.session.handle(other)
    assert isinstance(replay, msg.RefusalReply) and "replay" in replay.reason
    tight = [e.model_copy(update={"bound": 1e-3}) if e.name == "weighted_sum" else e
             for e in encoding]
    over = member.session.handle(task.model_copy(update={"round": 2, "encoding": tight}))
    assert isinstance(over, msg.RefusalReply) and over.fatal  # a wrong declaration
    assert over.reason == OVER_BOUND_REASON  # the same words whatever the data
    assert fed.announced == [("org-0", 1)]  # round 2 was refused before announcing
    small = PaillierKeyPair.generate(BITS)  # a session that insists on 2048-bit keys
    strict = PaillierSession(
        fed.locals[0], participant_id="org-0", job_id=JOB, announce=lambda r: None
    )
    weak = strict.handle(task.model_copy(update={"public_key": paillier_key_message(
        small.public_key)}))
    assert isinstance(weak, msg.RefusalReply) and "1024-bit modulus" in weak.reason
