"""Secure sums through the round drivers: what the coordinator receives, dropouts, refusals."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chisquare

from fedclust.coordinator.center_kmeans import FederatedCenters
from fedclust.coordinator.exact_fcm import run_exact_fcm
from fedclust.coordinator.secure_sum import MaskedSummation, field_encodings
from fedclust.core.errors import ProtocolError, RefusedError, UnavailableError
from fedclust.crypto.fixedpoint import Statistic, encode
from fedclust.crypto.masking import IdentityKey
from fedclust.participant.local import LocalParticipant
from fedclust.participant.secure import PeerPins, SecureMember, SecureSession
from fedclust.protocol.maths.center_kmeans import center_kmeans
from fedclust.protocol.wire import messages as msg

JOB = "job-secure"
MAX_ROWS, VALUE_BOUND = 10**6, 1e3


class Watched(SecureMember):
    """A member whose stage answers are recorded (what crosses to the coordinator) and that
    can be made to fail at one stage (a dropout)."""

    def __init__(self, member: SecureMember) -> None:
        super().__init__(member.local, member._session, algorithm="ffcm", job_id=JOB)
        self.sent: list[msg.Reply] = []
        self.received: list[msg.TaskSpec] = []
        self.fail_at: str | None = None

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        self.received.append(spec)
        if spec.kind == self.fail_at:
            raise UnavailableError(f"{self.name} went silent")
        reply = super().answer(spec)
        self.sent.append(reply)
        return reply


def cohort(
    n: int, rows: int = 300, seed: int = 0
) -> tuple[list[LocalParticipant], list[Watched], MaskedSummation]:
    rng = np.random.default_rng(seed)
    locals_ = [
        LocalParticipant(rng.normal(size=(rows, 3)) + 2 * i, name=f"org-{i}") for i in range(n)
    ]
    keys = {p.name: IdentityKey.generate() for p in locals_}
    members = [
        Watched(
            SecureMember(
                p,
                SecureSession(
                    p, participant_id=p.name, job_id=JOB, identity=keys[p.name], pins=PeerPins()
                ),
                algorithm="ffcm", job_id=JOB,
            )
        )
        for p in locals_
    ]
    summation = MaskedSummation(
        JOB, {k: v.public_bytes() for k, v in keys.items()},
        max_rows=MAX_ROWS, value_bound=VALUE_BOUND,
    )
    return locals_, members, summation


def fcm_task(centers: np.ndarray) -> msg.StatisticTask:
    return msg.StatisticTask.of("fcm_sums", centers, m=2.0)


CENTERS = np.array([[0.0, 0.0, 0.0], [2.0, 2.0, 2.0], [5.0, 5.0, 5.0]])


def test_masked_exact_fcm_equals_the_plaintext_run_to_the_encoding_bound() -> None:
    locals_, members, summation = cohort(4)
    plain = run_exact_fcm(locals_, 3, init=CENTERS, eps=1e-6)
    masked = run_exact_fcm(members, 3, init=CENTERS, eps=1e-6, summation=summation)
    assert masked.n_rounds == plain.n_rounds
    # Per round the sums are exact to n·2^-(f+1) (f >= 27 here, relative 1e-8 of the sums);
    # the centers are ratios of such sums, and 1e-9 leaves three orders of margin over the
    # observed ~1e-11 while any real disagreement (a missing or doubled term) is >= 1e-2.
    np.testing.assert_allclose(masked.centers, plain.centers, rtol=0, atol=1e-9)
    assert summation.rounds == masked.n_rounds


def test_the_coordinator_receives_uniform_vectors_whose_sum_is_the_aggregate() -> None:
    locals_, members, summation = cohort(3)
    total, names = summation.sum(members, fcm_task(CENTERS), msg.StatisticReply)
    assert names == ("org-0", "org-1", "org-2")
    encoding = {
        e.name: e
        for e in field_encodings(
            fcm_task(CENTERS), n_features=3, n_parties=3, max_rows=MAX_ROWS,
            value_bound=VALUE_BOUND,
        )
    }
    plain = [p.statistic("fcm_sums", CENTERS, {"m": 2.0}) for p in locals_]
    stat = encoding["weighted_sum"]
    assert stat.words == 2  # 3 · N·B = 3e9 > 2^21: two words hold it at resolution 2^-40
    received = []
    for member, own in zip(members, plain, strict=True):
        (masked,) = [r for r in member.sent if isinstance(r, msg.MaskedInputReply)]
        vector = masked.vectors["weighted_sum"].to_numpy()
        clear = encode(
            Statistic("weighted_sum", stat.scale_bits, stat.bound, stat.words), own["weighted_sum"]
        )
        assert vector.dtype == np.uint64 and not np.array_equal(vector, clear)
        received.append(vector)
    # 3 x 9 values are too few for a test of uniformity; the masks' uniformity is tested on
    # long vectors in tests/crypto/test_masking.py. Here: no masked value shares its top
    # 16 bits (of the highest limb) with the clear encoding's (which are all 0x0000 or
    # 0xffff): the probability of a chance match for one value is 2 / 2^16, for any of 27
    # values < 1e-3.
    for vector in received:
        assert not np.isin(vector[..., -1] >> np.uint64(48), [0, 0xFFFF]).any()
    expected = sum(p["weighted_sum"] for p in plain)
    got = total.fields["weighted_sum"].to_numpy()
    bound = Statistic("weighted_sum", stat.scale_bits, stat.bound, stat.words).error_bound(3)
    assert np.abs(got - expected).max() <= bound + 1e-12 * np.abs(expected).max()


def test_masked_long_vector_passes_a_uniformity_test() -> None:
    # 700 centers in 3-D: weighted_sum has 2 100 values per party and u_sum 700; the top
    # byte of one party's 2 800 masked values, 256 bins of ~11 expected (chi-square valid).
    rng = np.random.default_rng(1)
    _, members, summation = cohort(3, rows=2000)
    centers = rng.normal(size=(700, 3)) * 3
    summation.sum(members, fcm_task(centers), msg.StatisticReply)
    (masked,) = [r for r in members[0].sent if isinstance(r, msg.MaskedInputReply)]
    values = np.concatenate([v.to_numpy().ravel() for v in masked.vectors.values()])
    top = (values >> np.uint64(56)).astype(np.int64)
    # Fails by chance with probability 1e-9 (fresh keys: not seedable); an unmasked or
    # biased vector gives p ~ 0 (see tests/crypto/test_masking.py).
    assert chisquare(np.bincount(top, minlength=256)).pvalue > 1e-9


@pytest.mark.parametrize("stage", ["secure_input", "secure_unmask"])
def test_a_dropout_after_the_key_exchange_leaves_the_survivors_exact_sum(stage: str) -> None:
    locals_, members, summation = cohort(5)
    members[2].fail_at = stage
    total, names = summation.sum(members, fcm_task(CENTERS), msg.StatisticReply)
    survivors = [p for p in locals_ if p.name in names]
    if stage == "secure_input":
        assert names == ("org-0", "org-1", "org-3", "org-4")
        assert any("org-2" in note and "dropped out" in note for note in summation.notes)
    else:  # it submitted, then went silent: its input is in the sum, others unmask it
        assert len(names) == 5
    expected = sum(p.statistic("fcm_sums", CENTERS, {"m": 2.0})["weighted_sum"] for p in survivors)
    np.testing.assert_allclose(total.fields["weighted_sum"].to_numpy(), expected, rtol=1e-9)


def test_too_many_dropouts_fail_the_sum_and_say_why() -> None:
    _, members, summation = cohort(4)  # threshold 3
    members[0].fail_at = members[1].fail_at = "secure_input"
    with pytest.raises(ProtocolError, match="cannot be unmasked"):
        summation.sum(members, fcm_task(CENTERS), msg.StatisticReply)


def test_a_required_sum_fails_when_anyone_drops() -> None:
    _, members, summation = cohort(4)
    members[3].fail_at = "secure_input"
    with pytest.raises(RefusedError, match="org-3"):
        summation.sum(members, fcm_task(CENTERS), msg.StatisticReply, required=True)


def test_a_participant_refusing_by_its_privacy_rule_becomes_a_recovered_dropout() -> None:
    locals_, members, summation = cohort(4)
    # N <= C(F+1)/F: 4 rows, 3 features, 3 clusters -> 4 <= 4 refused (Corcuera Bárcena).
    tiny = LocalParticipant(np.ones((4, 3)), name="org-1")
    members[1].local = tiny
    _session(members[1])._local = tiny
    total, names = summation.sum(members, fcm_task(CENTERS), msg.StatisticReply)
    assert "org-1" not in names
    assert any("org-1" in n and "C(F+1)/F" in n for n in summation.notes), summation.notes
    summed = [p.statistic("fcm_sums", CENTERS, {"m": 2.0}) for p in locals_ if p.name in names]
    expected = sum(s["u_sum"] for s in summed)
    np.testing.assert_allclose(total.fields["u_sum"].to_numpy(), expected, rtol=1e-9)


def test_a_value_over_its_declared_bound_fails_the_sum_saying_nothing_of_the_data() -> None:
    rng = np.random.default_rng(0)
    locals_ = [LocalParticipant(rng.normal(size=(50, 2)) * 10, name=f"o{i}") for i in range(3)]
    keys = {p.name: IdentityKey.generate() for p in locals_}
    members = [
        SecureMember(
            p, SecureSession(p, participant_id=p.name, job_id=JOB, identity=keys[p.name],
                             pins=PeerPins()),
            algorithm="ffcm", job_id=JOB,
        )
        for p in locals_
    ]
    summation = MaskedSummation(
        JOB, {k: v.public_bytes() for k, v in keys.items()}, max_rows=10, value_bound=1.0
    )
    task = msg.StatisticTask.of("fcm_sums", np.zeros((2, 2)), m=2.0)
    with pytest.raises(ProtocolError, match="does not hold for what it computes") as info:
        summation.sum(members, task, msg.StatisticReply)  # a wrong declaration, not a dropout
    assert re.search(r"\d", str(info.value).replace("'o0'", "")) is None  # no count, magnitude


# -- a coordinator that misbehaves: the participants refuse -------------------------------------
def _session(member: SecureMember) -> SecureSession:
    session = member._session
    assert isinstance(session, SecureSession)
    return session


def _identities(members: list[Watched]) -> dict[str, str]:
    return {
        m.name: base64.b64encode(_session(m)._identity.public_bytes()).decode() for m in members
    }


def _setup_task(members: list[Watched]) -> msg.SecureSetupTask:
    return msg.SecureSetupTask(
        roster=[m.name for m in members], degree=None, threshold=len(members) // 2 + 1,
        identities=_identities(members),
    )


def _setup(members: list[Watched]) -> list[msg.Reply]:
    """The job's key setup (complete graph), answered by every member."""
    spec = _setup_task(members)
    adverts = [_session(m).handle(spec) for m in members]
    wire = [a.advert for a in adverts if isinstance(a, msg.KeyAdvertReply)]
    assert len(wire) == len(members), adverts
    return [_session(m).handle(msg.SecureGraphTask(adverts=wire)) for m in members]


def _input(member: Watched, r: int, names: list[str]) -> msg.Reply:
    task = fcm_task(CENTERS)
    return _session(member).handle(
        msg.SecureInputTask(
            round=r, cohort=names, statistic=task,
            encoding=field_encodings(
                task, n_features=3, n_parties=len(names), max_rows=MAX_ROWS,
                value_bound=VALUE_BOUND,
            ),
        )
    )


def test_the_setup_gives_every_member_the_same_graph() -> None:
    _, members, _ = cohort(4)
    acks = _setup(members)
    assert all(isinstance(a, msg.GraphReply) for a in acks)
    assert len({a.graph_sha256 for a in acks if isinstance(a, msg.GraphReply)}) == 1
    again = _session(members[0]).handle(
        _setup_task(members).model_copy(update={"threshold": 4})
    )
    assert isinstance(again, msg.RefusalReply) and "was made already" in again.reason


def test_asking_for_both_kinds_of_share_of_one_peer_is_refused() -> None:
    _, members, _ = cohort(4)
    _setup(members)
    names = [m.name for m in members]
    assert all(isinstance(_input(m, 1, names), msg.MaskedInputReply) for m in members)
    both = msg.SecureUnmaskTask(round=1, survivors=names, dropped=[names[3]], shares=[])
    reply = _session(members[0]).handle(both)
    assert isinstance(reply, msg.RefusalReply) and "nobody as both" in reply.reason
    # Asked first as a survivor, org-3 cannot later be declared dropped (its round key).
    first = _session(members[1]).handle(
        msg.SecureUnmaskTask(round=1, survivors=names, dropped=[], shares=[])
    )
    assert isinstance(first, msg.UnmaskSharesReply)
    later = _session(members[1]).handle(
        msg.SecureUnmaskTask(round=1, survivors=names[:3], dropped=[names[3]], shares=[])
    )
    assert isinstance(later, msg.RefusalReply) and "contradicts" in later.reason


def test_a_substituted_job_key_is_refused() -> None:
    _, members, _ = cohort(3)
    spec = _setup_task(members)
    adverts = [_session(m).handle(spec) for m in members]
    wire = [a.advert for a in adverts if isinstance(a, msg.KeyAdvertReply)]
    # The coordinator swaps org-1's mask key for one of its own choosing (org-2's here).
    swapped = [
        w.model_copy(update={"mask_public": wire[2].mask_public}) if w.sender == "org-1" else w
        for w in wire
    ]
    reply = _session(members[0]).handle(msg.SecureGraphTask(adverts=swapped))
    assert isinstance(reply, msg.RefusalReply) and "integrity" in reply.reason


def test_a_substituted_identity_key_is_refused() -> None:
    _, members, _ = cohort(3)
    _setup(members)  # pins every peer's identity
    identities = _identities(members)
    identities["org-2"] = base64.b64encode(IdentityKey.generate().public_bytes()).decode()
    first = _session(members[0])
    next_job = SecureSession(
        members[0].local, participant_id="org-0", job_id="job-2", identity=first._identity,
        pins=first._pins,
    )
    reply = next_job.handle(
        msg.SecureSetupTask(roster=list(identities), threshold=2, identities=identities)
    )
    assert isinstance(reply, msg.RefusalReply) and "pinned" in reply.reason


def test_a_replayed_round_is_refused() -> None:
    _, members, _ = cohort(3)
    _setup(members)
    names = [m.name for m in members]
    assert isinstance(_input(members[0], 5, names), msg.MaskedInputReply)
    assert isinstance(_input(members[0], 6, names), msg.MaskedInputReply)
    for r in (5, 4):  # older rounds (the latest, asked again alike, gets its answer again)
        reply = _input(members[0], r, names)
        assert isinstance(reply, msg.RefusalReply) and "replay" in reply.reason
    stale = _session(members[0]).handle(
        msg.SecureUnmaskTask(round=3, survivors=names, dropped=[], shares=[])
    )
    assert isinstance(stale, msg.RefusalReply) and "round in progress" in stale.reason


def test_participants_refuse_a_cohort_below_the_minimum() -> None:
    _, members, _ = cohort(3)
    spec = _setup_task(members[:2])
    replies = [_session(m).handle(spec) for m in members[:2]]
    assert all(isinstance(r, msg.RefusalReply) and "min_cohort" in r.reason for r in replies)
    _setup(members)
    reply = _input(members[0], 1, [m.name for m in members[:2]])
    assert isinstance(reply, msg.RefusalReply) and "min_cohort" in reply.reason


def test_a_sum_before_the_key_setup_is_refused() -> None:
    _, members, _ = cohort(3)
    reply = _input(members[0], 1, [m.name for m in members])
    assert isinstance(reply, msg.RefusalReply) and "holds no keys" in reply.reason


def test_the_coordinator_refuses_to_start_a_sum_below_the_minimum_cohort() -> None:
    _, members, summation = cohort(3)
    with pytest.raises(RefusedError, match="at least 3"):
        summation.sum(members[:2], fcm_task(CENTERS), msg.StatisticReply)


def test_a_participant_without_a_session_refuses_secure_stages() -> None:
    from fedclust.participant.dispatch import execute

    local = LocalParticipant(np.zeros((5, 2)), name="x")
    task = msg.Task(
        job_id=JOB, task_id=0, algorithm="ffcm",
        spec=msg.SecureUnmaskTask(round=1, survivors=[], dropped=[], shares=[]),
    )
    reply = execute(local, task)
    assert isinstance(reply, msg.RefusalReply) and "no secure sums" in reply.reason



def test_center_kmeans_over_held_local_centers_is_the_same_procedure_masked_or_plain() -> None:
    # FedFCM's k-means averaging: each participant keeps its local FCM centers; the server's
    # k-means is one procedure whose sums are masked or plain. Seeded (no start), with splits
    # and swaps, the masked run must take the same steps and end at the same centers.
    locals_, members, summation = cohort(4, rows=400)
    # The bounds a job derives from declarations (rows <= 512, |x| <= 16), not the loose
    # module defaults: with those the inertia keeps only 14 fractional bits, and a decision
    # compared at 6 significant digits may tip on the rounding.
    summation.set_bounds(max_rows=512, value_bound=16.0)
    start = np.array([[0.5, 0.5, 0.5], [3.0, 3.0, 3.0], [6.5, 6.5, 6.5]])
    for member in members:
        member.hold_local_fcm(start, m=2.0, tol=1e-6, max_iter=500)
    masked = center_kmeans(FederatedCenters(members, summation), 3, 3)
    plain = center_kmeans(FederatedCenters(locals_, None), 3, 3)
    assert masked.sums == plain.sums
    np.testing.assert_array_equal(masked.contributors, plain.contributors)
    # The center sums carry 40 fractional bits with these bounds (error 4·2^-41 per
    # coordinate); a center is a mean of >= 1 local centers, so 1e-8 bounds the difference.
    np.testing.assert_allclose(masked.centers, plain.centers, rtol=0, atol=1e-8)
    # Only masked sums left the participants: no reply carried a local center in the clear.
    assert all(
        isinstance(r, msg.KeyAdvertReply | msg.GraphReply | msg.MaskedInputReply
                   | msg.UnmaskSharesReply)
        for member in members for r in member.sent
    )
    kinds = {
        msg.task_name(r.statistic) for member in members for r in member.received
        if isinstance(r, msg.SecureInputTask)
    }
    assert kinds == {"center_sums", "center_scatter"}


def test_a_round_begun_before_a_restart_is_refused_after_it() -> None:
    # The agent saves the latest round begun (JobState.secure_round) and starts its sessions
    # from it: a coordinator cannot replay that round to a restarted agent.
    from fedclust.participant.agent import JobState

    saved = JobState.from_json(JobState(secure_round=7).to_json())
    assert saved.secure_round == 7
    old = JobState().to_json()
    del old["secure_round"]  # states saved by earlier agents have no such field
    assert JobState.from_json(old).secure_round == 0
    _, members, _ = cohort(3)
    restarted = SecureSession(
        members[0].local, participant_id="org-0", job_id=JOB,
        identity=_session(members[0])._identity, pins=PeerPins(), last_round=saved.secure_round,
    )
    members[0]._session = restarted
    _setup(members)
    names = [m.name for m in members]
    for r, refused in ((7, True), (8, False)):
        reply = _input(members[0], r, names)
        assert isinstance(reply, msg.RefusalReply) == refused, reply


@pytest.mark.parametrize("graph", ["auto", "full"])
def test_a_large_cohort_masks_on_its_graph_and_recovers_dropouts(graph: str) -> None:
    # 120 participants: SecAgg+ ("auto") picks a k-regular graph with k far below 119,
    # "full" the complete graph; five go silent before their masked input and the
    # survivors' sum is still exact.
    locals_, members, summation = cohort(120, rows=20)
    summation = MaskedSummation(
        JOB, summation._identities, max_rows=MAX_ROWS, value_bound=VALUE_BOUND,
        graph="full" if graph == "full" else "auto",
    )
    for m in members[10:15]:
        m.fail_at = "secure_input"
    total, names = summation.sum(members, fcm_task(CENTERS), msg.StatisticReply)
    params = summation.parameters
    assert params is not None
    # Each participant was sent the sealed shares of its neighbours only.
    unmask = [r for m in members for r in m.received if isinstance(r, msg.SecureUnmaskTask)]
    most = max(len(t.shares) for t in unmask)
    if graph == "auto":
        assert params.degree is not None and params.degree < 60 and most <= params.degree
        assert any("regular graph" in n for n in summation.notes)
    else:
        assert params.degree is None and most == 114  # every other survivor
    # Round keys went out only for dropped peers, and only from survivors next to them.
    dropped = {m.name for m in members[10:15]}
    revealed = [
        set(r.pair_keys) for m in members for r in m.sent if isinstance(r, msg.UnmaskSharesReply)
    ]
    assert len(revealed) == 115 and all(keys <= dropped for keys in revealed)
    assert 0 < sum(len(keys) for keys in revealed) <= 5 * params.neighbours
    assert len(names) == 115
    summed = [p.statistic("fcm_sums", CENTERS, {"m": 2.0}) for p in locals_ if p.name in names]
    expected = sum(s["weighted_sum"] for s in summed)
    np.testing.assert_allclose(total.fields["weighted_sum"].to_numpy(), expected, rtol=1e-9)


def test_a_restarted_participant_masks_later_sums_with_its_saved_keys(tmp_path: Path) -> None:
    locals_, members, summation = cohort(4)
    first = _session(members[0])

    def session(last_round: int) -> SecureSession:
        return SecureSession(
            members[0].local, participant_id="org-0", job_id=JOB, identity=first._identity,
            pins=PeerPins(), last_round=last_round, keys_dir=tmp_path / "keys",
        )

    members[0]._session = session(0)
    summation.sum(members, fcm_task(CENTERS), msg.StatisticReply)
    saved, answers = tmp_path / "keys" / "setup-1.json", tmp_path / "keys" / "answers.json"
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == [answers.name, saved.name]
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in (saved, answers))  # both secret
    members[0]._session = session(summation.rounds)  # the agent restarts from its state
    total, names = summation.sum(members, fcm_task(CENTERS), msg.StatisticReply)
    assert names == ("org-0", "org-1", "org-2", "org-3")
    expected = sum(p.statistic("fcm_sums", CENTERS, {"m": 2.0})["weighted_sum"] for p in locals_)
    np.testing.assert_allclose(total.fields["weighted_sum"].to_numpy(), expected, rtol=1e-9)
    # Without its keys it would have dropped out of every later sum, and a sum over the
    # three others, after those over four, would give its statistics by difference: the
    # sum is refused instead (issue 20).
    members[0]._session = SecureSession(
        members[0].local, participant_id="org-0", job_id=JOB, identity=first._identity,
        pins=PeerPins(), last_round=summation.rounds,
    )
    with pytest.raises(RefusedError, match="would reveal the statistics of 'org-0'"):
        summation.sum(members, fcm_task(CENTERS), msg.StatisticReply)
    saved.write_text("{not json")
    with pytest.raises(ValueError, match="not a file of saved masking keys"):
        session(summation.rounds)


def test_the_same_stage_asked_again_gets_the_same_answer() -> None:
    # A coordinator that lost an answer before storing it asks the same task again on
    # resume: the same masked vector and sealed shares (nothing new), not a fresh masking.
    _, members, _ = cohort(4)
    _setup(members)
    names = [m.name for m in members]
    first = _input(members[0], 1, names)
    again = _input(members[0], 1, names)
    assert isinstance(first, msg.MaskedInputReply) and again == first
    other = _input(members[0], 1, names[:3] + names[3:])  # equal: still the same answer
    assert other == first
    changed = _session(members[0]).handle(
        msg.SecureInputTask(
            round=1, cohort=names, statistic=fcm_task(CENTERS * 2),
            encoding=field_encodings(
                fcm_task(CENTERS), n_features=3, n_parties=4, max_rows=MAX_ROWS,
                value_bound=VALUE_BOUND,
            ),
        )
    )
    assert isinstance(changed, msg.RefusalReply) and "replay" in changed.reason


def test_field_encodings_widen_the_ring_instead_of_dropping_resolution() -> None:
    # Resolution 2^-40 in every field; a field takes the fewest words that hold
    # n·bound·2^40 <= 2^(64w-3): one word up to n·bound = 2^21 (the encoding every field had
    # before), and the scale (values to 1e12, 10^7 rows, 1,000 participants) in three.
    # The moment sums' bounds are N·3B and N·9B².
    def words(n_parties: int, max_rows: int, value_bound: float) -> dict[str, int]:
        return {
            e.name: e.words
            for e in field_encodings(
                msg.StatisticTask.of("moment_sums", np.zeros((1, 3))), n_features=3,
                n_parties=n_parties, max_rows=max_rows, value_bound=value_bound,
            )
        }

    assert words(4, 2**9, 2**8) == {"sum": 1, "sum_sq": 2}  # 3·2^19 and 9·2^27
    assert words(4, 2**10, 2**8) == {"sum": 2, "sum_sq": 2}  # 3·2^20 > 2^21
    assert words(4, 2**9, 2**40) == {"sum": 2, "sum_sq": 3}  # 3·2^51 and 9·2^91
    assert words(1000, 10**7, 1e12) == {"sum": 2, "sum_sq": 3}  # ~2^74 and ~2^116
    with pytest.raises(ValueError, match=r"'sum_sq'.*widest secure sum \(16 words\)"):
        words(3, 2**20, 1e150)


def test_a_masked_sum_in_natural_units_is_exact_to_the_resolution() -> None:
    # Incomes to 1e12 and counts in one statistic: Σx² per column needs three words; the
    # coordinator receives uint64 limbs on a last axis and decodes every column, the counts'
    # too, to n·2^-41 of the exact sum.
    rng = np.random.default_rng(3)
    locals_ = [
        LocalParticipant(
            np.column_stack(
                [rng.uniform(1e5, 1e12, 50), rng.poisson(3.0, 50), rng.normal(size=50)]
            ),
            name=f"org-{i}",
        )
        for i in range(3)
    ]
    keys = {p.name: IdentityKey.generate() for p in locals_}
    members = [
        Watched(SecureMember(
            p, SecureSession(p, participant_id=p.name, job_id=JOB, identity=keys[p.name],
                             pins=PeerPins()),
            algorithm="ffcm", job_id=JOB,
        ))
        for p in locals_
    ]
    summation = MaskedSummation(
        JOB, {k: v.public_bytes() for k, v in keys.items()}, max_rows=64, value_bound=2.0**40
    )
    origin = np.zeros((1, 3))
    total, _ = summation.sum(
        members, msg.StatisticTask.of("moment_sums", origin), msg.StatisticReply
    )
    for member in members:
        (masked,) = [r for r in member.sent if isinstance(r, msg.MaskedInputReply)]
        assert masked.vectors["sum"].shape == (3, 2)
        assert masked.vectors["sum_sq"].shape == (3, 3)
    plain = [p.statistic("moment_sums", origin) for p in locals_]
    for name in ("sum", "sum_sq"):
        exact = sum(m[name] for m in plain)
        got = total.fields[name].to_numpy()
        np.testing.assert_allclose(got, exact, rtol=2**-52, atol=3 * 2.0**-41)
