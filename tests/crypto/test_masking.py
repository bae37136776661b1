"""SecAgg+ masking with per-job keys (Bell et al. 2020 over Bonawitz et al. 2017): exact sums
over many rounds, dropouts, refusals, integrity, key hygiene and known answers."""

from __future__ import annotations

import hashlib
import math
import pickle
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from numpy.typing import NDArray
from scipy.stats import chisquare

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.crypto import _prg, shamir
from fedclust.crypto.fixedpoint import Statistic, add, decode, encode
from fedclust.crypto.graph import MaskingGraph, graph_parameters
from fedclust.crypto.masking import (
    EncryptedShare,
    IdentityKey,
    IntegrityError,
    JobConfig,
    KeyAdvert,
    MaskedInput,
    MaskingClient,
    MaskingServer,
    ServerRound,
    UnmaskRequest,
    UnmaskResponse,
)

U64 = NDArray[np.uint64]
Values = dict[str, U64]
JOB = "job-7"
STAT = Statistic("local_sums", scale_bits=24, bound=1e4)


@dataclass
class Job:
    config: JobConfig
    keys: dict[str, IdentityKey]
    public: dict[str, bytes]
    clients: dict[str, MaskingClient]
    server: MaskingServer

    @property
    def ids(self) -> list[str]:
        return list(self.config.participants)

    @property
    def graph(self) -> MaskingGraph:
        return self.server.graph


def make_job(
    n: int, *, degree: int | None = None, threshold: int | None = None, setup: bool = True
) -> Job:
    names = [f"org-{i:03d}" for i in range(n)]
    keys = {p: IdentityKey.generate() for p in names}
    public = {p: k.public_bytes() for p, k in keys.items()}
    config = JobConfig(JOB, tuple(names), degree, threshold or n // 2 + 1)
    clients = {p: MaskingClient(config, p, keys[p], public) for p in names}
    job = Job(config, keys, public, clients, MaskingServer(config, public))
    if setup:
        listed = job.server.receive_adverts([c.advertise() for c in clients.values()])
        for c in clients.values():
            assert c.receive_adverts(listed).digest == job.server.graph.digest
    return job


def sparse_job(n: int) -> Job:
    params = graph_parameters(n)
    assert params.degree is not None
    return make_job(n, degree=params.degree, threshold=params.threshold)


def ring_of(graph: MaskingGraph) -> list[str]:
    """The ring order the graph module documents: by SHA-256(seed ‖ id)."""
    return sorted(graph.nodes, key=lambda p: hashlib.sha256(graph.seed + p.encode()).digest())


def random_values(
    names: Iterable[str], rng: np.random.Generator, size: int = 50
) -> dict[str, Values]:
    """Full-range uint64 inputs (the sums wrap around Z_2^64), two statistics each."""
    return {
        p: {
            "a": rng.integers(0, 2**64, size=size, dtype=np.uint64),
            "b": rng.integers(0, 2**64, size=(2, 3), dtype=np.uint64),
        }
        for p in names
    }


def expected_sum(values: Mapping[str, Values], members: Iterable[str]) -> Values:
    chosen = [values[p] for p in members]
    return {k: add([v[k] for v in chosen]) for k in chosen[0]}


def assert_sums_equal(got: Mapping[str, U64], want: Mapping[str, U64]) -> None:
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == np.uint64
        assert np.array_equal(got[k], want[k]), k


@dataclass
class Collected:
    round: ServerRound
    inputs: dict[str, MaskedInput]
    request: UnmaskRequest
    inboxes: dict[str, list[EncryptedShare]]


def collect(
    job: Job,
    round_no: int,
    values: Mapping[str, Values],
    *,
    cohort: Sequence[str] | None = None,
    dropped: Iterable[str] = (),
) -> Collected:
    """Stage 2 of a round: every cohort member masks; the dropouts' messages are lost."""
    members = list(cohort if cohort is not None else job.ids)
    lost = set(dropped)
    rnd = job.server.begin(round_no, members)
    inputs = {}
    for p in members:
        message = job.clients[p].masked_input(round_no, members, values[p])
        inputs[p] = message
        if p not in lost:
            rnd.receive_masked_input(message)
    request, inboxes = rnd.unmask_request()
    return Collected(rnd, inputs, request, inboxes)


def run_round(
    job: Job,
    round_no: int,
    values: Mapping[str, Values],
    *,
    cohort: Sequence[str] | None = None,
    dropped: Iterable[str] = (),
    silent: Iterable[str] = (),
) -> dict[str, U64]:
    c = collect(job, round_no, values, cohort=cohort, dropped=dropped)
    quiet = set(silent)
    for p in sorted(c.request.survivors - quiet):
        c.round.receive_unmask_response(job.clients[p].unmask(c.request, c.inboxes[p]))
    return c.round.aggregate()


# -- exact sums ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "sparse"), [(5, False), (120, True)])
def test_exact_sums_over_several_rounds_with_the_same_job_keys(n: int, sparse: bool) -> None:
    job = sparse_job(n) if sparse else make_job(n)
    if sparse:
        assert job.graph.degree == job.config.degree and job.graph.degree is not None
        assert job.graph.degree < n - 1
    else:
        assert job.graph.degree is None
    rng = np.random.default_rng(n)
    for round_no in (1, 2, 5):  # rounds need only increase
        values = random_values(job.ids, rng)
        assert_sums_equal(run_round(job, round_no, values), expected_sum(values, job.ids))


def test_sparse_graph_shares_go_to_the_neighbours_only() -> None:
    job = sparse_job(120)
    k = job.config.degree
    assert k is not None
    values = random_values(job.ids, np.random.default_rng(0), size=3)
    c = collect(job, 1, values)
    for p, message in c.inputs.items():
        recipients = [s.recipient for s in message.shares]
        assert sorted(recipients) == list(job.graph.neighbours(p)) and len(recipients) == k
    assert all(len(box) == k for box in c.inboxes.values())


def test_masked_inputs_look_uniform_and_decode_to_the_real_sum() -> None:
    job = make_job(4)
    ids = job.ids
    rng = np.random.default_rng(0)
    x = {p: rng.uniform(-STAT.bound, STAT.bound, 20_000) for p in ids}
    x[ids[0]][:] = 0.0  # worst case: a constant plaintext must still look uniform on the wire
    values = {p: {STAT.name: encode(STAT, x[p])} for p in ids}
    c = collect(job, 1, values)
    wire = c.inputs[ids[0]].vectors[STAT.name]
    assert wire.dtype == np.uint64 and not np.array_equal(wire, values[ids[0]][STAT.name])
    # Chi-square on the top byte of the zero party's masked words and on every byte of
    # them (256 bins). Keys are fresh, so the test cannot be seeded: for uniform masks the
    # p-value is uniform on [0, 1] and each assertion fails by chance with probability 1e-9.
    # An unmasked zero puts everything in bin 0; a stuck top bit empties half the bins.
    top = (wire >> np.uint64(56)).astype(np.int64)
    assert chisquare(np.bincount(top, minlength=256)).pvalue > 1e-9
    everything = wire.view(np.uint8)
    assert chisquare(np.bincount(everything, minlength=256)).pvalue > 1e-9
    for p in ids:
        c.round.receive_unmask_response(job.clients[p].unmask(c.request, c.inboxes[p]))
    total = c.round.aggregate()[STAT.name]
    # Masks cancel exactly in Z_2^64 ...
    assert np.array_equal(total, add([values[p][STAT.name] for p in ids]))
    # ... so the decode is within the fixed-point bound n · 2^-(f+1) of the real sum.
    exact = np.array([math.fsum(v) for v in zip(*(x[p] for p in ids), strict=True)])
    err = np.abs(decode(STAT, total, len(ids)) - exact).max()
    assert err <= STAT.error_bound(len(ids)) + 4e4 * 2**-52


def test_the_same_input_is_masked_differently_in_every_round() -> None:
    job = make_job(3)
    values = {p: {"s": np.zeros(4096, dtype=np.uint64)} for p in job.ids}
    seen = []
    for round_no in (1, 2):
        c = collect(job, round_no, values)
        seen.append(c.inputs[job.ids[1]].vectors["s"].copy())
        for p in job.ids:
            c.round.receive_unmask_response(job.clients[p].unmask(c.request, c.inboxes[p]))
        assert not c.round.aggregate()["s"].any()
    first, second = seen
    assert np.count_nonzero(first == second) == 0  # each word equal with probability 2^-64
    # The difference of the two rounds' masks is itself uniform: no fixed offset relates them.
    top = ((second - first) >> np.uint64(56)).astype(np.int64)
    assert chisquare(np.bincount(top, minlength=256)).pvalue > 1e-9


def test_several_statistics_in_one_round_get_independent_masks() -> None:
    job = make_job(3)
    counts = Statistic("counts", scale_bits=0, bound=1e6)
    values = {
        p: {
            STAT.name: encode(STAT, np.full((2, 3), float(i))),
            counts.name: encode(counts, [10 * i]),
            "same": np.zeros(6, dtype=np.uint64),
            "twin": np.zeros(6, dtype=np.uint64),
        }
        for i, p in enumerate(job.ids)
    }
    c = collect(job, 1, values)
    masked = c.inputs[job.ids[0]].vectors
    assert {k: v.shape for k, v in masked.items()} == {
        STAT.name: (2, 3), counts.name: (1,), "same": (6,), "twin": (6,)
    }
    # Equal plaintexts under two names get different masks (one keystream laid end to end).
    assert np.count_nonzero(masked["same"] == masked["twin"]) == 0
    for p in job.ids:
        c.round.receive_unmask_response(job.clients[p].unmask(c.request, c.inboxes[p]))
    out = c.round.aggregate()
    assert decode(STAT, out[STAT.name], 3).tolist() == [[3.0] * 3] * 2
    assert decode(counts, out["counts"], 3).tolist() == [30.0]
    assert not out["same"].any() and not out["twin"].any()


# -- dropouts --------------------------------------------------------------------------------------


def test_random_dropouts_up_to_the_stated_fraction_on_a_sparse_graph() -> None:
    job = sparse_job(120)
    params = graph_parameters(120)
    rng = np.random.default_rng(5)
    n_drop = int(params.dropout_fraction * 120)
    assert n_drop == 6
    ids = job.ids
    first = [str(p) for p in rng.choice(ids, size=n_drop, replace=False)]
    rest = [p for p in ids if p not in first]
    second = [str(p) for p in rng.choice(rest, size=n_drop, replace=False)]
    # Round 1: six drop after masking. Round 2: they take part again, six others drop.
    # Round 3: the first six sit out (not in the cohort) and the second six drop.
    plans: list[tuple[list[str], list[str]]] = [
        (ids, first), (ids, second), ([p for p in ids if p not in first], second),
    ]
    for round_no, (cohort, dropped) in enumerate(plans, start=1):
        values = random_values(cohort, rng, size=20)
        c = collect(job, round_no, values, cohort=cohort, dropped=dropped)
        assert c.request.dropped == frozenset(dropped)
        for p in sorted(c.request.survivors):
            response = job.clients[p].unmask(c.request, c.inboxes[p])
            near = set(job.graph.neighbours(p))
            # Round keys for exactly the dropped neighbours; seed shares only of survivors.
            assert set(response.pair_keys) == near & set(dropped)
            assert set(response.self_mask_shares) <= (near | {p}) & c.request.survivors
            assert not set(response.pair_keys) & set(response.self_mask_shares)
            c.round.receive_unmask_response(response)
        survivors = [p for p in cohort if p not in dropped]
        assert_sums_equal(c.round.aggregate(), expected_sum(values, survivors))


@pytest.mark.parametrize("dropped", [["org-002"], ["org-000", "org-004"]])
def test_dropouts_on_the_complete_graph(dropped: list[str]) -> None:
    job = make_job(5)  # threshold 3
    rng = np.random.default_rng(1)
    values = random_values(job.ids, rng)
    got = run_round(job, 1, values, dropped=dropped)
    assert_sums_equal(got, expected_sum(values, [p for p in job.ids if p not in dropped]))
    # The dropouts take part in the next round with the same job keys.
    values = random_values(job.ids, rng)
    assert_sums_equal(run_round(job, 2, values), expected_sum(values, job.ids))


def test_a_silent_survivor_without_dropped_neighbours_does_not_matter() -> None:
    job = make_job(5)
    values = random_values(job.ids, np.random.default_rng(2))
    got = run_round(job, 1, values, silent=["org-004", "org-003"])  # 3 = t answers remain
    assert_sums_equal(got, expected_sum(values, job.ids))


def test_a_silent_survivor_with_a_dropped_neighbour_is_named() -> None:
    job = make_job(5)
    values = random_values(job.ids, np.random.default_rng(3))
    with pytest.raises(
        ProtocolError, match=r"survivor 'org-004' did not answer.*dropout 'org-001'"
    ):
        run_round(job, 1, values, dropped=["org-001"], silent=["org-004"])


def sparse_ring_job(threshold: int) -> tuple[Job, list[str]]:
    job = make_job(12, degree=4, threshold=threshold)
    return job, ring_of(job.graph)


def test_survivors_split_in_two_fail_cleanly() -> None:
    job, ring = sparse_ring_job(2)
    assert set(job.graph.neighbours(ring[5])) == {ring[3], ring[4], ring[6], ring[7]}
    dropped = [ring[3], ring[4], ring[9], ring[10]]  # two runs of k/2 = 2: two components
    values = random_values(job.ids, np.random.default_rng(4))
    with pytest.raises(ProtocolError, match="disconnected"):
        collect(job, 1, values, dropped=dropped)
    # A server that asks anyway is refused by the participants themselves.
    survivors = frozenset(job.ids) - set(dropped)
    forged = UnmaskRequest(JOB, 1, survivors, frozenset(dropped))
    with pytest.raises(RefusedError, match="splits the masking graph"):
        job.clients[ring[0]].unmask(forged, [])


def test_a_survivor_with_fewer_than_t_holders_fails_cleanly() -> None:
    job, ring = sparse_ring_job(3)
    # ring[5] keeps only ring[7] and itself as holders of its seed shares: 2 < t = 3. The
    # survivors stay connected (one run of two missing, one of one).
    dropped = [ring[3], ring[4], ring[6]]
    values = random_values(job.ids, np.random.default_rng(6))
    with pytest.raises(
        ProtocolError, match=rf"2 shares of the seed of '{ring[5]}' arrived, fewer than threshold=3"
    ):
        run_round(job, 1, values, dropped=dropped)


def test_too_few_survivors_fail_cleanly() -> None:
    job = make_job(5)
    values = random_values(job.ids, np.random.default_rng(7))
    with pytest.raises(ProtocolError, match="2 masked inputs arrived, fewer than min_cohort=3"):
        collect(job, 1, values, dropped=job.ids[2:])
    forged = UnmaskRequest(JOB, 1, frozenset(job.ids[:2]), frozenset(job.ids[2:]))
    with pytest.raises(RefusedError, match="fewer than min_cohort=3"):
        job.clients[job.ids[0]].unmask(forged, [])


def test_too_few_unmask_answers_fail_cleanly() -> None:
    job = make_job(5)  # threshold 3
    values = random_values(job.ids, np.random.default_rng(8))
    with pytest.raises(ProtocolError, match="fewer than threshold=3"):
        run_round(job, 1, values, silent=job.ids[2:])


# -- refusals --------------------------------------------------------------------------------------


def zeros(names: Iterable[str]) -> dict[str, Values]:
    return {p: {"s": np.zeros(4, dtype=np.uint64)} for p in names}


def test_config_refusals() -> None:
    with pytest.raises(RefusedError, match="min_cohort=3"):
        JobConfig(JOB, ("a", "b"), None, 2)
    with pytest.raises(RefusedError, match="min_cohort=5"):
        JobConfig(JOB, ("a", "b", "c", "d"), None, 3, min_cohort=5)
    with pytest.raises(ValueError, match="even"):
        JobConfig(JOB, tuple("abcdefgh"), 3, 2)
    with pytest.raises(ValueError, match="'threshold' parameter of JobConfig"):
        JobConfig(JOB, tuple("abcdefgh"), 4, 6)  # t above k + 1 can never be met
    with pytest.raises(ValueError, match="'threshold' parameter of JobConfig"):
        JobConfig(JOB, tuple("abcd"), None, 1)  # t = 1: every share is the seed itself
    with pytest.raises(ValueError, match="distinct"):
        JobConfig(JOB, ("a", "a", "b"), None, 2)
    assert JobConfig(JOB, ("c", "a", "b"), None, 2).participants == ("a", "b", "c")


def test_cohort_below_min_cohort_is_refused() -> None:
    job = make_job(5)
    with pytest.raises(RefusedError, match="2 participants, fewer than min_cohort=3"):
        job.clients["org-000"].masked_input(1, ["org-000", "org-001"], zeros(["x"])["x"])


def test_cohort_that_disconnects_the_graph_is_refused() -> None:
    job, ring = sparse_ring_job(2)
    cohort = [p for p in ring if p not in {ring[3], ring[4], ring[9], ring[10]}]
    with pytest.raises(RefusedError, match="splits the masking graph"):
        job.clients[ring[0]].masked_input(1, cohort, zeros([ring[0]])[ring[0]])
    # Each removed run alone leaves a connected cohort, which is accepted.
    ok = [p for p in ring if p not in {ring[3], ring[4]}]
    assert job.clients[ring[0]].masked_input(1, ok, zeros([ring[0]])[ring[0]]).round == 1


def test_cohort_with_too_few_share_holders_is_refused() -> None:
    job, ring = sparse_ring_job(3)
    cohort = [p for p in ring if p not in {ring[3], ring[4], ring[6]}]
    with pytest.raises(RefusedError, match=r"only 1 of this participant's graph neighbours.*"
                       r"threshold=3"):
        job.clients[ring[5]].masked_input(1, cohort, zeros([ring[5]])[ring[5]])
    # Its neighbour ring[7] still has ring[5], ring[8], ring[9]: it may mask.
    assert job.clients[ring[7]].masked_input(1, cohort, zeros([ring[7]])[ring[7]]).round == 1


def test_cohort_membership_is_checked() -> None:
    job = make_job(5)
    me = job.clients["org-000"]
    with pytest.raises(RefusedError, match="not in the secure sum's cohort"):
        me.masked_input(1, job.ids[1:], zeros(["x"])["x"])
    with pytest.raises(RefusedError, match="outside the job's key setup"):
        me.masked_input(1, [*job.ids, "stranger"], zeros(["x"])["x"])
    with pytest.raises(ProtocolError, match="within the job's key setup"):
        job.server.begin(1, [*job.ids, "stranger"])


def test_replayed_or_older_rounds_are_refused() -> None:
    job = make_job(4)
    values = zeros(job.ids)
    assert not run_round(job, 3, values)["s"].any()
    me = job.clients["org-000"]
    for old in (3, 2):
        with pytest.raises(RefusedError, match=rf"round {old} .* not newer than round 3.*replay"):
            me.masked_input(old, job.ids, values["org-000"])
    with pytest.raises(ValueError, match=r"'round' parameter of MaskingServer\.begin"):
        job.server.begin(3, job.ids)
    # The server's round 4 refuses a masked input of round 3 (a replay of the last round).
    rnd = job.server.begin(4, job.ids)
    with pytest.raises(ProtocolError, match="another job or round"):
        rnd.receive_masked_input(replace(me.masked_input(5, job.ids, values["org-000"]), round=3))


def test_unmask_request_must_split_the_cohort() -> None:
    job = make_job(5)
    c = collect(job, 1, zeros(job.ids))
    me, ids = job.clients["org-000"], job.ids
    bad_requests = [
        UnmaskRequest(JOB, 1, frozenset(ids[:4]), frozenset()),  # org-004 missing
        UnmaskRequest(JOB, 1, frozenset(ids), frozenset(["stranger"])),  # not in the cohort
        UnmaskRequest(JOB, 1, frozenset(ids), frozenset(ids[4:])),  # org-004 named twice
    ]
    for request in bad_requests:
        with pytest.raises(RefusedError, match="split the round's cohort"):
            me.unmask(request, c.inboxes["org-000"])
    for request in (replace(c.request, round=2), replace(c.request, job_id="job-8")):
        with pytest.raises(RefusedError, match="does not match the round in progress"):
            me.unmask(request, c.inboxes["org-000"])
    # None of the refused requests counts as an answer: the real one still works.
    assert set(me.unmask(c.request, c.inboxes["org-000"]).self_mask_shares) == set(ids)


def test_participant_is_never_asked_both_kinds_for_one_peer() -> None:
    # Naming a peer both survivor (seed share) and dropout (round key) is refused, and a
    # real answer never holds both for one peer.
    job = make_job(5)
    c = collect(job, 1, zeros(job.ids), dropped=["org-003"])
    me = job.clients["org-000"]
    both = UnmaskRequest(JOB, 1, frozenset(job.ids), frozenset(["org-003"]))
    with pytest.raises(RefusedError, match="naming nobody as both"):
        me.unmask(both, c.inboxes["org-000"])
    # The dropout's own sealed share (which a server could pass on) is not opened: with it
    # the server would hold the dropout's seed share as well as the round key.
    from_dropout = [s for s in c.inputs["org-003"].shares if s.recipient == "org-000"]
    assert len(from_dropout) == 1
    with pytest.raises(ProtocolError, match="one per surviving neighbour"):
        me.unmask(c.request, [*c.inboxes["org-000"], *from_dropout])
    response = me.unmask(c.request, c.inboxes["org-000"])
    assert set(response.pair_keys) == {"org-003"}
    assert "org-003" not in response.self_mask_shares


def test_unmask_request_contradicting_an_earlier_one_is_refused() -> None:
    job = make_job(5)
    c = collect(job, 1, zeros(job.ids))
    me, ids = job.clients["org-000"], job.ids
    first = me.unmask(c.request, c.inboxes["org-000"])
    assert set(first.self_mask_shares) == set(ids)
    again = me.unmask(c.request, c.inboxes["org-000"])  # a retry of the same request is fine
    assert dict(again.self_mask_shares) == dict(first.self_mask_shares)
    later = UnmaskRequest(JOB, 1, frozenset(ids[:4]), frozenset(ids[4:]))
    with pytest.raises(RefusedError, match="contradicts an earlier one"):
        me.unmask(later, [s for s in c.inboxes["org-000"] if s.sender != "org-004"])


def test_advert_refusals() -> None:
    job = make_job(5, setup=False)
    adverts = [c.advertise() for c in job.clients.values()]
    with pytest.raises(ProtocolError, match="advertised already"):
        job.clients["org-000"].advertise()
    with pytest.raises(RefusedError, match="fewer than min_cohort=3"):
        job.server.receive_adverts(adverts[:2])
    with pytest.raises(ProtocolError, match="distinct members"):
        job.server.receive_adverts([*adverts, adverts[0]])
    with pytest.raises(ProtocolError, match="distinct members"):
        job.server.receive_adverts([*adverts[1:], replace(adverts[0], sender="stranger")])
    with pytest.raises(ProtocolError, match="no secure sum before"):
        job.clients["org-000"].masked_input(1, job.ids, zeros(["x"])["x"])
    # Adverts of another job (same roster, same identities) are refused as a replay.
    other = JobConfig("job-8", job.config.participants, None, 3)
    stale = [MaskingClient(other, p, job.keys[p], job.public).advertise() for p in job.ids]
    with pytest.raises(RefusedError, match="refused as a replay"):
        job.clients["org-000"].receive_adverts(stale)
    listed = job.server.receive_adverts(adverts)
    with pytest.raises(ProtocolError, match="set up already"):
        job.server.receive_adverts(adverts)
    job.clients["org-000"].receive_adverts(listed)
    with pytest.raises(ProtocolError, match="once"):
        job.clients["org-000"].receive_adverts(listed)


def test_server_refuses_malformed_round_messages() -> None:
    job = make_job(5)
    rnd = job.server.begin(1, job.ids[:4])
    values = zeros(job.ids)
    inputs = {p: job.clients[p].masked_input(1, job.ids[:4], values[p]) for p in job.ids[:4]}
    with pytest.raises(ProtocolError, match="No unmask request"):
        rnd.aggregate()
    rnd.receive_masked_input(inputs["org-000"])
    with pytest.raises(ProtocolError, match="once from each member"):
        rnd.receive_masked_input(inputs["org-000"])
    with pytest.raises(ProtocolError, match="once from each member"):
        rnd.receive_masked_input(replace(inputs["org-001"], sender="org-004"))  # not in cohort
    with pytest.raises(ProtocolError, match="same statistics and shapes"):
        rnd.receive_masked_input(replace(inputs["org-001"], vectors={"t": np.zeros(4, np.uint64)}))
    with pytest.raises(ProtocolError, match="uint64"):
        floats: Mapping[str, U64] = {"s": np.zeros(4)}  # type: ignore[dict-item]
        rnd.receive_masked_input(replace(inputs["org-001"], vectors=floats))
    with pytest.raises(ProtocolError, match="Sealed seed shares"):
        rnd.receive_masked_input(
            replace(inputs["org-001"], shares=inputs["org-001"].shares[:1] * 2)
        )
    for p in ("org-001", "org-002"):
        rnd.receive_masked_input(inputs[p])
    request, inboxes = rnd.unmask_request()
    assert request.dropped == frozenset(["org-003"])
    with pytest.raises(ProtocolError, match="closed"):
        rnd.receive_masked_input(inputs["org-003"])
    response = job.clients["org-000"].unmask(request, inboxes["org-000"])
    for forged in (
        replace(response, pair_keys={}),  # withholds the round key with the dropout
        replace(response, sender="org-003"),  # not a survivor
        replace(response, self_mask_shares={**response.self_mask_shares, "org-003": b"x"}),
    ):
        with pytest.raises(ProtocolError, match="answer the request"):
            rnd.receive_unmask_response(forged)
    with pytest.raises(ProtocolError, match="another job or round"):
        rnd.receive_unmask_response(replace(response, round=2))
    rnd.receive_unmask_response(response)
    with pytest.raises(ProtocolError, match="once per survivor"):
        rnd.receive_unmask_response(response)


# -- integrity -------------------------------------------------------------------------------------


def test_substituted_public_key_is_refused() -> None:
    job = make_job(4, setup=False)
    adverts = [c.advertise() for c in job.clients.values()]
    server_key = _prg.x25519_public_bytes(_prg.x25519_generate())
    for field_name in ("mask_public", "enc_public"):
        changed: KeyAdvert = replace(adverts[1], **{field_name: server_key})  # type: ignore[arg-type]
        swapped = [adverts[0], changed, *adverts[2:]]
        with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
            job.server.receive_adverts(swapped)
        with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
            job.clients["org-000"].receive_adverts(swapped)
    # Re-signing with another organisation's identity key does not help either.
    forged = replace(adverts[1], mask_public=server_key)
    forged = replace(forged, signature=job.keys["org-002"]._sign(forged.signed_bytes(job.config)))
    with pytest.raises(IntegrityError):
        job.clients["org-003"].receive_adverts([adverts[0], forged, *adverts[2:]])
    # The untouched adverts still set the job up.
    listed = job.server.receive_adverts(adverts)
    assert job.clients["org-003"].receive_adverts(listed).digest == job.server.graph.digest


def test_tampered_advert_or_wrong_nonce_is_refused() -> None:
    job = make_job(4, setup=False)
    adverts = [c.advertise() for c in job.clients.values()]
    nonce = adverts[2].nonce
    for tampered in (
        replace(adverts[2], nonce=bytes([nonce[0] ^ 1]) + nonce[1:]),  # the server's pick
        replace(adverts[2], nonce=nonce[:16]),  # wrong length
        replace(adverts[2], signature=bytes(64)),
    ):
        listed = [*adverts[:2], tampered, adverts[3]]
        with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
            job.server.receive_adverts(listed)
        with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
            job.clients["org-000"].receive_adverts(listed)
    # A client offered a validly signed advert of its own identity that is not the one it
    # made (another instance's keys and nonce) refuses too.
    twin = MaskingClient(job.config, "org-000", job.keys["org-000"], job.public)
    with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
        job.clients["org-000"].receive_adverts([twin.advertise(), *adverts[1:]])
    # ... as it does when its own advert is left out.
    with pytest.raises(IntegrityError):
        job.clients["org-000"].receive_adverts(adverts[1:])
    # A nonce other than the one it drew, even under its own valid signature (the same
    # keys), is refused: the graph seed must include the client's own fresh nonce.
    own = adverts[0]
    renonced = replace(own, nonce=bytes(32))
    renonced = replace(
        renonced, signature=job.keys["org-000"]._sign(renonced.signed_bytes(job.config))
    )
    with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
        job.clients["org-000"].receive_adverts([renonced, *adverts[1:]])
    # A validly signed advert whose nonce is not 32 bytes is refused by everyone.
    short = replace(adverts[3], nonce=b"\x01" * 16)
    short = replace(short, signature=job.keys["org-003"]._sign(short.signed_bytes(job.config)))
    with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
        job.server.receive_adverts([*adverts[:3], short])
    with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
        job.clients["org-000"].receive_adverts([*adverts[:3], short])


def test_tampered_or_misrouted_sealed_share_is_refused() -> None:
    job = make_job(4)
    c = collect(job, 1, zeros(job.ids))
    box = c.inboxes["org-000"]
    good = box[0]
    flipped = replace(good, ciphertext=good.ciphertext[:-1] + bytes([good.ciphertext[-1] ^ 1]))
    with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
        job.clients["org-000"].unmask(c.request, [flipped, *box[1:]])
    # A share sealed for org-000 relabelled as another surviving neighbour's: the AEAD binds
    # the sender (and the key is that pair's).
    other = next(p for p in job.ids if p not in {"org-000", good.sender})
    relabelled = replace(good, sender=other)
    with pytest.raises(IntegrityError):
        job.clients["org-000"].unmask(c.request, [relabelled])
    # Misrouted: org-000's inbox handed to org-001.
    with pytest.raises(ProtocolError, match="addressed to this participant"):
        job.clients["org-001"].unmask(c.request, box)
    # Redirected: the recipient field rewritten to org-001 — the AEAD binds the recipient.
    redirected = next(s for s in box if s.sender != "org-001")
    with pytest.raises(IntegrityError):
        job.clients["org-001"].unmask(c.request, [replace(redirected, recipient="org-001")])
    with pytest.raises(ProtocolError, match="one per surviving neighbour"):
        job.clients["org-000"].unmask(c.request, [good, good])


def test_reflected_or_forged_sealed_share_is_refused() -> None:
    job = make_job(4)
    c = collect(job, 1, zeros(job.ids))
    a, b, other = "org-000", "org-001", "org-002"
    # a's own share for b, reflected back to a as if b had sent it: same pair key, but the
    # associated data names the sender and recipient in order.
    mine = next(s for s in c.inputs[a].shares if s.recipient == b)
    reflected = replace(mine, sender=b, recipient=a)
    with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
        job.clients[a].unmask(c.request, [reflected])
    # A neighbour that seals (with the right key) a share at another participant's x, or
    # bytes that are no share, is caught after decryption.
    key = job.clients[b]._seal_keys[a]
    template = EncryptedShare(JOB, 1, b, a, b"")
    row = shamir.split(bytes(32), threshold=job.config.threshold, xs=[1, 2, 3])[0]
    for plain in (
        shamir.share_bytes(job.config.x_of(other), row),  # someone else's x
        shamir.share_bytes(job.config.x_of(a), row)[:-1],  # truncated
        b"\xff" * 40,  # limbs out of range
    ):
        forged = replace(
            template, ciphertext=_prg.seal(key, plain, template.associated_data())
        )
        with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
            job.clients[a].unmask(c.request, [forged])
    # The genuine share at a's own x is accepted.
    right = shamir.share_bytes(job.config.x_of(a), row)
    genuine = replace(template, ciphertext=_prg.seal(key, right, template.associated_data()))
    assert job.clients[a].unmask(c.request, [genuine]).self_mask_shares[b] == right


def test_shares_between_non_neighbours_are_refused() -> None:
    job, ring = sparse_ring_job(3)
    me, far = ring[0], ring[5]
    assert far not in job.graph.neighbours(me)
    rnd = job.server.begin(1, job.ids)
    inputs = {p: job.clients[p].masked_input(1, job.ids, zeros([p])[p]) for p in job.ids}
    # The server refuses a masked input whose shares go beyond the sender's neighbours ...
    stray = EncryptedShare(JOB, 1, far, me, inputs[far].shares[0].ciphertext)
    with pytest.raises(ProtocolError, match="sender's neighbours"):
        rnd.receive_masked_input(replace(inputs[far], shares=(*inputs[far].shares[1:], stray)))
    for p in job.ids:
        rnd.receive_masked_input(inputs[p])
    request, inboxes = rnd.unmask_request()
    assert {s.sender for s in inboxes[me]} == set(job.graph.neighbours(me))
    # ... and a participant refuses a share from a non-neighbour (it shares no key with it).
    with pytest.raises(ProtocolError, match="one per surviving neighbour"):
        job.clients[me].unmask(request, [*inboxes[me], stray])


def test_share_of_an_earlier_round_is_refused() -> None:
    job = make_job(4)
    c1 = collect(job, 1, zeros(job.ids))
    for p in job.ids:
        c1.round.receive_unmask_response(job.clients[p].unmask(c1.request, c1.inboxes[p]))
    c1.round.aggregate()
    c2 = collect(job, 2, zeros(job.ids))
    old = c1.inboxes["org-000"][0]
    with pytest.raises(ProtocolError, match="for this round"):
        job.clients["org-000"].unmask(c2.request, [old])
    with pytest.raises(IntegrityError):  # the round is in the associated data
        job.clients["org-000"].unmask(c2.request, [replace(old, round=2)])


def test_tampered_seed_share_in_a_response_is_caught_by_the_commitment() -> None:
    job = make_job(5)
    c = collect(job, 1, zeros(job.ids))
    responses = [job.clients[p].unmask(c.request, c.inboxes[p]) for p in job.ids[:3]]
    x, y = shamir.share_from_bytes(responses[0].self_mask_shares["org-004"], 32)
    y = y.copy()
    y[-1] = (y[-1] + np.uint64(1)) % np.uint64(shamir.PRIME)  # in range, a different seed
    bad = {**responses[0].self_mask_shares, "org-004": shamir.share_bytes(x, y)}
    c.round.receive_unmask_response(replace(responses[0], self_mask_shares=bad))
    for r in responses[1:]:
        c.round.receive_unmask_response(r)
    with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
        c.round.aggregate()


# -- key hygiene -----------------------------------------------------------------------------------


def test_round_keys_of_one_round_do_not_unmask_another() -> None:
    job = make_job(5)
    rng = np.random.default_rng(9)
    d = "org-004"
    keys_by_round: list[dict[str, bytes]] = []
    responses_by_round: list[list[UnmaskResponse]] = []
    values_by_round = []
    rounds = []
    for round_no in (1, 2):
        values = random_values(job.ids, rng, size=8)
        c = collect(job, round_no, values, dropped=[d])
        responses = [job.clients[p].unmask(c.request, c.inboxes[p]) for p in job.ids[:4]]
        keys_by_round.append({r.sender: r.pair_keys[d] for r in responses})
        responses_by_round.append(responses)
        values_by_round.append(values)
        rounds.append(c.round)
    first, second = keys_by_round
    assert all(first[v] != second[v] for v in first)
    # A server that answers round 2's unmasking with round 1's revealed keys does not
    # remove round 2's masks with the dropout ...
    for r in responses_by_round[1]:
        rounds[1].receive_unmask_response(replace(r, pair_keys={d: first[r.sender]}))
    wrong = rounds[1].aggregate()
    want = expected_sum(values_by_round[1], job.ids[:4])
    assert all(np.count_nonzero(wrong[k] == want[k]) == 0 for k in want)
    # ... while round 1's keys do unmask round 1.
    for r in responses_by_round[0]:
        rounds[0].receive_unmask_response(r)
    assert_sums_equal(rounds[0].aggregate(), expected_sum(values_by_round[0], job.ids[:4]))


def test_privacy_argument_counts_the_targets_own_share() -> None:
    # The module's argument: a server that tells u "you survived" and u's honest neighbours
    # "u dropped" gets u's own seed share and every honest pair key, so t − 1 colluding
    # neighbours (not t) complete b_u and x_u. graph_parameters bounds exactly that event.
    job = make_job(5)  # complete graph, t = 3
    u, colluders, honest = "org-000", ["org-001", "org-002"], ["org-003", "org-004"]
    values = random_values(job.ids, np.random.default_rng(12), size=16)
    c = collect(job, 1, values)
    told_dropped = UnmaskRequest(JOB, 1, frozenset(job.ids) - {u}, frozenset([u]))
    own = job.clients[u].unmask(c.request, c.inboxes[u])
    leaked = [job.clients[p].unmask(c.request, c.inboxes[p]) for p in colluders]
    keys = {
        p: job.clients[p].unmask(
            told_dropped, [s for s in c.inboxes[p] if s.sender != u]
        ).pair_keys[u]
        for p in honest
    }
    keys.update({p: job.clients[p]._pair_key(u, 1) for p in colluders})  # they know theirs
    points = [shamir.share_from_bytes(r.self_mask_shares[u], 32) for r in (own, *leaked)]
    assert len(points) == job.config.threshold
    seed = shamir.combine([x for x, _ in points], np.stack([y for _, y in points]), 32)
    commitment = c.inputs[u].seed_commitment
    assert _prg.seed_commitment(seed, job_id=JOB, round_no=1, owner=u) == commitment
    names = sorted(values[u])
    flat = np.concatenate([c.inputs[u].vectors[k].reshape(-1) for k in names])
    stream = _prg.Keystream(flat.size)
    flat = flat - stream.words(_prg.self_mask_key(seed, job_id=JOB, round_no=1, owner=u))
    for v, key in keys.items():
        mask = stream.words(key)
        flat = flat - mask if u < v else flat + mask
    assert np.array_equal(flat, np.concatenate([values[u][k].reshape(-1) for k in names]))
    # With t − 2 colluders the server holds two shares of a threshold-3 sharing: no seed.
    two = points[:2]
    try:
        guess = shamir.combine([x for x, _ in two], np.stack([y for _, y in two]), 32)
    except ValueError:
        pass
    else:
        assert _prg.seed_commitment(guess, job_id=JOB, round_no=1, owner=u) != commitment


def long_term_secrets(job: Job, p: str) -> dict[str, bytes]:
    """Everything of ``p`` that lasts beyond one round (read from its private state)."""
    client = job.clients[p]
    out = {
        "identity": job.keys[p].private_bytes(),
        "enc_private": _prg.x25519_private_bytes(client._enc_key),
        "mask_private": _prg.x25519_private_bytes(client._mask_key),
    }
    for peer, shared in client._mask_secrets.items():
        out[f"mask_shared:{peer}"] = shared
    for peer, key in client._seal_keys.items():
        out[f"seal_key:{peer}"] = key
    return out


def test_no_long_term_key_ever_leaves_a_client() -> None:
    job = make_job(5)
    me, d = "org-000", "org-004"
    c = collect(job, 1, zeros(job.ids), dropped=[d])
    response = job.clients[me].unmask(c.request, c.inboxes[me])
    assert [f.name for f in fields(response)] == [
        "job_id", "round", "sender", "self_mask_shares", "pair_keys"
    ]
    # Seed shares: fixed-length Shamir shares at this participant's x, of survivors only.
    assert set(response.self_mask_shares) == set(job.ids) - {d}
    for raw in response.self_mask_shares.values():
        assert len(raw) == 4 * (shamir.limbs(32) + 1)
        assert shamir.share_from_bytes(raw, 32)[0] == job.config.x_of(me)
    # Round keys: the HKDF of the X25519 secret for this round, not the secret itself, and
    # not the next round's key.
    secret_values = long_term_secrets(job, me)
    shared = secret_values[f"mask_shared:{d}"]
    round_key = response.pair_keys[d]
    assert set(response.pair_keys) == {d} and len(round_key) == 32
    assert round_key == _prg.pair_mask_key(shared, job_id=JOB, round_no=1, a=me, b=d)
    assert round_key != shared
    assert round_key != _prg.pair_mask_key(shared, job_id=JOB, round_no=2, a=me, b=d)
    # No long-term secret appears anywhere in what the client sends during the round.
    sent = [*response.self_mask_shares.values(), *response.pair_keys.values()]
    sent += [s.ciphertext for s in c.inputs[me].shares]
    sent += [c.inputs[me].seed_commitment, *(v.tobytes() for v in c.inputs[me].vectors.values())]
    for blob in sent:
        for name, value in secret_values.items():
            assert value not in blob, name
    text = repr(response)
    assert all(value.hex() not in text for value in secret_values.values())
    assert round_key.hex() not in text


def test_secrets_do_not_print_or_pickle() -> None:
    job = make_job(3)
    key = job.keys["org-000"]
    assert key.private_bytes().hex() not in repr(key)
    assert key.private_bytes().hex()[:16] not in repr(key)
    assert "hidden" in repr(key)
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(key)
    client = job.clients["org-000"]
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(client)
    text = repr(client)
    assert all(v.hex()[:16] not in text for v in long_term_secrets(job, "org-000").values())
    restored = IdentityKey.from_private_bytes(key.private_bytes())
    assert restored.public_bytes() == key.public_bytes()


# -- known answers and domain separation -----------------------------------------------------------


def test_x25519_rfc7748_section_6_1() -> None:
    alice = _prg.x25519_from_bytes(
        bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    )
    bob = _prg.x25519_from_bytes(
        bytes.fromhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
    )
    alice_pub, bob_pub = _prg.x25519_public_bytes(alice), _prg.x25519_public_bytes(bob)
    assert alice_pub.hex() == "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
    assert bob_pub.hex() == "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"
    shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
    assert _prg.x25519_exchange(alice, bob_pub).hex() == shared
    assert _prg.x25519_exchange(bob, alice_pub).hex() == shared
    with pytest.raises(IntegrityError):  # low-order point (all zeros): no shared secret
        _prg.x25519_exchange(alice, bytes(32))


def test_hkdf_rfc5869_case_1() -> None:
    okm = _prg._hkdf(bytes([0x0B] * 22), salt=bytes(range(13)), info=bytes(range(0xF0, 0xFA)))
    # RFC 5869 A.1 gives 42 bytes; HKDF-Expand output is prefix-stable, so the first 32 match.
    assert okm.hex() == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"


def test_keystream_is_aes_ctr_from_counter_zero() -> None:
    key, other = bytes(range(32)), bytes(range(1, 33))

    def reference(k: bytes, n_words: int) -> list[int]:
        ecb = Cipher(algorithms.AES(k), modes.ECB()).encryptor()
        blocks = b"".join(ecb.update(i.to_bytes(16, "big")) for i in range(-(-n_words // 2)))
        return [int.from_bytes(blocks[8 * i : 8 * i + 8], "little") for i in range(n_words)]

    stream = _prg.Keystream(7)  # an odd count: the last block is half used
    words = stream.words(key)
    assert words.dtype == np.uint64 and words.shape == (7,)
    assert words.tolist() == reference(key, 7)
    # The same instance serves the next key from counter zero again.
    assert stream.words(other).tolist() == reference(other, 7)
    assert stream.words(key).tolist() == reference(key, 7)


def test_mask_keys_are_bound_to_their_context() -> None:
    shared = b"k" * 32
    key = _prg.pair_mask_key(shared, job_id="j", round_no=1, a="x", b="y")
    assert _prg.pair_mask_key(shared, job_id="j", round_no=1, a="y", b="x") == key
    variants = [
        _prg.pair_mask_key(shared, job_id="j2", round_no=1, a="x", b="y"),
        _prg.pair_mask_key(shared, job_id="j", round_no=2, a="x", b="y"),
        _prg.pair_mask_key(shared, job_id="j", round_no=1, a="x", b="z"),
        _prg.pair_mask_key(b"K" * 32, job_id="j", round_no=1, a="x", b="y"),
        # Other purposes from the same input keying material:
        _prg.self_mask_key(shared, job_id="j", round_no=1, owner="x"),
        _prg.share_encryption_key(shared, job_id="j", a="x", b="y"),
    ]
    assert len({key, *variants}) == len(variants) + 1
    self_key = _prg.self_mask_key(shared, job_id="j", round_no=1, owner="x")
    assert len({
        self_key,
        _prg.self_mask_key(shared, job_id="j", round_no=2, owner="x"),
        _prg.self_mask_key(shared, job_id="j", round_no=1, owner="y"),
        _prg.self_mask_key(shared, job_id="j2", round_no=1, owner="x"),
    }) == 4
    seal = _prg.share_encryption_key(shared, job_id="j", a="x", b="y")
    assert _prg.share_encryption_key(shared, job_id="j", a="y", b="x") == seal
    assert _prg.share_encryption_key(shared, job_id="j2", a="x", b="y") != seal
    commitment = _prg.seed_commitment(shared, job_id="j", round_no=1, owner="x")
    assert len({
        commitment,
        _prg.seed_commitment(shared, job_id="j", round_no=2, owner="x"),
        _prg.seed_commitment(shared, job_id="j", round_no=1, owner="y"),
        _prg.seed_commitment(b"K" * 32, job_id="j", round_no=1, owner="x"),
    }) == 4
    # Length prefixes: ("ab", "c") and ("a", "bc") are different contexts, and so are
    # pair ids that concatenate alike.
    assert _prg.label("ab", "c") != _prg.label("a", "bc")
    assert _prg.pair_mask_key(shared, job_id="j", round_no=1, a="ab", b="c") != (
        _prg.pair_mask_key(shared, job_id="j", round_no=1, a="a", b="bc")
    )


def test_label_encodes_every_integer_type_as_eight_bytes() -> None:
    # Round numbers pass check_int as numpy integers too; bytes(n) of such an int would be n
    # zero bytes (a different context, and a gigabyte for a large round number).
    for same in (np.int64(3), np.uint32(3)):
        assert _prg.label("r", same) == _prg.label("r", 3)  # type: ignore[arg-type]
    assert _prg.label(True) == _prg.label(1)
    assert _prg.label(3) == bytes.fromhex("00000008" "0000000000000003")
    job = make_job(3)
    values = random_values(job.ids, np.random.default_rng(13), size=4)
    rnd = job.server.begin(1, job.ids)  # the server counts rounds in Python ints ...
    for p in job.ids:  # ... a participant got its round number from numpy
        rnd.receive_masked_input(job.clients[p].masked_input(np.int64(1), job.ids, values[p]))  # type: ignore[arg-type]
    request, inboxes = rnd.unmask_request()
    for p in job.ids:
        rnd.receive_unmask_response(job.clients[p].unmask(request, inboxes[p]))
    assert_sums_equal(rnd.aggregate(), expected_sum(values, job.ids))


def test_aead_binds_sender_and_recipient() -> None:
    key = bytes(32)
    ad = EncryptedShare("j", 1, "alice", "bob", b"").associated_data()
    sealed = _prg.seal(key, b"share", ad)
    assert _prg.open_sealed(key, sealed, ad) == b"share"
    assert _prg.seal(key, b"share", ad) != sealed  # a fresh random nonce every time
    for other in (
        EncryptedShare("j", 1, "bob", "alice", b""),
        EncryptedShare("j", 1, "alice", "carol", b""),
        EncryptedShare("j", 2, "alice", "bob", b""),
        EncryptedShare("j2", 1, "alice", "bob", b""),
    ):
        with pytest.raises(IntegrityError, match=r"^integrity check failed$"):
            _prg.open_sealed(key, sealed, other.associated_data())
    with pytest.raises(IntegrityError):
        _prg.open_sealed(b"\x01" * 32, sealed, ad)
    with pytest.raises(IntegrityError):
        _prg.open_sealed(key, sealed[:20], ad)


def test_advert_signature_covers_every_field() -> None:
    job = make_job(4, setup=False)
    advert: KeyAdvert = job.clients["org-000"].advertise()
    public = job.public["org-000"]
    _prg.verify(public, advert.signature, advert.signed_bytes(job.config))
    for field_name in ("job_id", "sender", "enc_public", "mask_public", "nonce"):
        value = getattr(advert, field_name)
        other = value + ("x" if isinstance(value, str) else b"\x00")
        tampered: KeyAdvert = replace(advert, **{field_name: other})
        with pytest.raises(IntegrityError):
            _prg.verify(public, tampered.signature, tampered.signed_bytes(job.config))
    # The roster digest, the degree and the threshold are signed too: an advert made for one
    # set of parameters does not verify under another.
    config = job.config
    for changed in (
        replace(config, participants=(*config.participants, "org-999")),
        replace(config, participants=config.participants[:3]),
        replace(config, degree=2),
        replace(config, threshold=config.threshold + 1),
    ):
        assert changed.job_id == config.job_id
        with pytest.raises(IntegrityError):
            _prg.verify(public, advert.signature, advert.signed_bytes(changed))
    with pytest.raises(IntegrityError):  # another organisation's public key
        _prg.verify(job.public["org-001"], advert.signature, advert.signed_bytes(job.config))
