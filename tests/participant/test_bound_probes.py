"""A cheating coordinator cannot make a refusal depend on the rows (issue 20, F2 and F3).

Replayed through the real agent, for two organisations holding 60 and 61 rows (the same
declared bucket R = 64, 33 to 64 rows, and value bound B = 8): every crafted task gets the
same bytes back from both, and an honest task is answered.

- F3, a crafted local K: the terms are the coordinator's, so it declared
  ``local_k_range=(2, 100)`` and asked ``local_k`` at k = 60 (answered) and 61 (refused with
  "ValueError"): N_l = 60. Now any local clustering with K above the bucket's lower edge
  R/2 + 1 = 33 is refused, whatever N_l.
- F2, a coordinator-chosen encoding bound: a Paillier ``fcm_sums`` with K = 1 has u_sum =
  N_l; a bound of N_l − 0.5 gave the fatal over-bound refusal, N_l + 0.5 an answer. Now any
  bound below what the declaration implies (``protocol.wire.bounds.field_bounds`` at R and B) is
  refused before anything is computed, and one fatal refusal ends the agent's part in the job.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fedclust.coordinator.declarations import declare_job
from fedclust.coordinator.secure_sum import field_encodings
from fedclust.core.errors import RefusedError
from fedclust.crypto.fixedpoint import BoundError
from fedclust.participant import agent as agent_module
from fedclust.participant import dispatch
from fedclust.participant.agent import OVER_BOUND_BEFORE, JobState
from fedclust.participant.local import LocalParticipant
from fedclust.participant.policy import Policy
from fedclust.participant.terms import OwnBounds, encoding_floor, held_bounds, require_task
from fedclust.protocol.maths.declaration import Declaration
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.bounds import rows_allow_k, standardised_bound
from tests.participant.test_agent import (
    COORDINATOR_TOKEN,
    JOB,
    ROSTER,
    Counting,
    blobs,
    run,
    task,
    terms,
    wire,
    write_config,
    write_rows,
)

B = 8.0  # both organisations configure value_bound = 8; their row bound is derived: 64
POLICY = f"[policy]\nvalue_bound = {B}\n"
DECLARED = Declaration(64, B, True, False, False)
OWN = OwnBounds.of(DECLARED, 2)
ONE_CENTER = msg.StatisticTask.of("fcm_sums", wire([[1.5, 1.5]]), m=2.0)


@pytest.fixture
def organisations(tmp_path: Path) -> Iterator[dict[int, tuple[Path, Counting]]]:
    """Two agents' folders, holding 60 and 61 rows, each with its counting service."""
    out = {}
    for n in (60, 61):
        folder = tmp_path / str(n)
        folder.mkdir()
        write_rows(folder, blobs(n))
        service = Counting(folder / "counting.db")
        service.put_roster(JOB, ROSTER)
        out[n] = (write_config(folder, policy=POLICY), service)
    yield out
    for _, service in out.values():
        service.app.state.store.close()


def replies(
    organisations: dict[int, tuple[Path, Counting]], tasks: list[msg.Task]
) -> dict[int, list[str]]:
    """Each organisation's replies to ``tasks``, as the exact JSON bytes it sent."""
    out = {}
    for n, (config, service) in organisations.items():
        fake = run(config, tasks, service)
        out[n] = [c.reply.model_dump_json() for c in fake.contributions]
    return out


def declare(**fields: Any) -> msg.Task:
    spec = msg.DeclareTask(terms=terms(fields.pop("algorithm", "ffcm"), **fields))
    return task(0, spec, spec.terms.algorithm)


def reason(reply: str) -> str:
    parsed = msg.RefusalReply.model_validate_json(reply)
    return parsed.reason


# -- F3: a crafted local K -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("algorithm", "crafted"),
    [
        ("ffcm", msg.LocalKTask(k_min=61, k_max=61, m=2.0, seed=1)),
        ("ffcm", msg.LocalKTask(k_min=60, k_max=60, m=2.0, seed=1)),
        ("fedfcm-avg", msg.LocalFcmTask(centers=wire(np.zeros((61, 2))), m=2.0, tol=1e-6,
                                        max_iter=5)),
        ("fedfcm", msg.HoldLocalFcmTask(centers=wire(np.zeros((61, 2))), m=2.0, tol=1e-6,
                                        max_iter=5)),
        ("fkm", msg.HoldKmeansInitTask(k=61, seed=1)),
        ("kfed", msg.KfedCentersTask(k_local=61, seed=1)),
        ("kfed-dennis", msg.KfedDennisCentersTask(k_local=61, seed=1)),
    ],
    ids=["local_k-61", "local_k-60", "local_fcm", "hold_local_fcm", "hold_kmeans_init", "kfed",
         "kfed-dennis"],
)
def test_a_crafted_local_k_gets_the_same_refusal_from_60_and_61_rows(
    organisations: dict[int, tuple[Path, Counting]], algorithm: msg.Algorithm, crafted: Any
) -> None:
    """The coordinator's own terms allow K up to 100; the declaration does not."""
    fields = {"algorithm": algorithm, "local_k_range": (2, 100), "k_range": (2, 100)}
    got = replies(organisations, [declare(**fields), task(1, crafted, algorithm)])
    assert got[60] == got[61]  # byte for byte
    assert (
        "this participant declares row_bound=64 (33 to 64 rows), so it refuses any K above 33"
        in reason(got[60][1])
    )


def test_a_local_k_the_bucket_guarantees_is_answered(
    organisations: dict[int, tuple[Path, Counting]]
) -> None:
    got = replies(organisations, [
        declare(local_k_range=(2, 33)),
        task(1, msg.LocalKTask(k_min=2, k_max=33, m=2.0, seed=1)),
    ])
    assert all(msg.LocalKReply.model_validate_json(r[1]) for r in got.values())


def test_fedcref_init_with_a_given_k_above_the_bucket_is_refused() -> None:
    fedcref: dict[str, Any] = {"k_range": None, "standardise": False, "local_k_range": None,
                               "fedcref": {"local_k": 61}}
    spec = msg.FedCRefInitTask(hidden=(4,), initial="kmeans", k=61, k_max=6, epochs=1, seed=0)
    with pytest.raises(RefusedError, match="refuses any K above 33"):
        require_task(terms("fedcref", **fedcref), "fedcref", spec, OWN)
    # K chosen by the silhouette (capped at the rows) or the labels: nothing to refuse.
    chosen = fedcref | {"fedcref": {"k_max": 6}}
    require_task(terms("fedcref", **chosen), "fedcref", spec.model_copy(update={"k": None}), OWN)


def test_the_coordinator_fails_such_a_job_at_its_declaration_by_the_same_rule() -> None:
    """One rule (``protocol.wire.bounds.rows_allow_k``) at both ends: the API refuses a job whose
    local clustering K the declared bucket does not guarantee, for every algorithm the agent
    refuses it in."""
    assert rows_allow_k(DECLARED, 33) and not rows_allow_k(DECLARED, 34)

    class Declares:
        name = "hospital-a"

        def answer(self, spec: msg.TaskSpec) -> msg.Reply:
            assert isinstance(spec, msg.DeclareTask)
            return msg.DeclarationReply.of(DECLARED)

    for algorithm in ("fedfcm", "fedfcm-avg", "fkm", "kfed", "kfed-dennis"):
        job = terms(algorithm, k_range=(2, 34), local_k_range=None)
        with pytest.raises(ValueError, match="lower it \\(--k/--k-range\\) to at most 33"):
            declare_job([Declares()], job, n_features=2)
        declare_job([Declares()], terms(algorithm, k_range=(2, 33), local_k_range=None),
                    n_features=2)


# -- F2: coordinator-chosen encoding bounds --------------------------------------------------------
def paillier_input(service: Counting, round_no: int, encoding: list[msg.FieldEncoding],
                   statistic: msg.SumTaskSpec = ONE_CENTER) -> msg.Task:
    with httpx.Client(
        base_url="http://counting/api/v1", transport=service.transport,
        headers={"Authorization": f"Bearer {COORDINATOR_TOKEN}"},
    ) as client:
        response = client.get(f"/jobs/{JOB}/paillier-key")
        assert response.status_code == 200, response.text
        key = msg.PaillierKey.model_validate_json(response.content)
    spec = msg.PaillierInputTask(
        round=round_no, statistic=statistic, encoding=encoding, public_key=key, max_parties=3
    )
    return task(round_no, spec)


def honest(statistic: msg.SumTaskSpec = ONE_CENTER, *, value_bound: float = B
           ) -> list[msg.FieldEncoding]:
    """The encoding an honest coordinator sends these two (R = 64)."""
    return field_encodings(statistic, n_features=2, n_parties=3, max_rows=64,
                           value_bound=value_bound)


def with_bound(encoding: list[msg.FieldEncoding], name: str, bound: float
               ) -> list[msg.FieldEncoding]:
    return [e.model_copy(update={"bound": bound}) if e.name == name else e for e in encoding]


def test_the_u_sum_bound_probe_gets_the_same_refusal_and_an_honest_bound_an_answer(
    organisations: dict[int, tuple[Path, Counting]]
) -> None:
    """Measured: u_sum = N_l for K = 1, so bound N_l − 0.5 was refused as fatal and
    N_l + 0.5 answered. Now every bound below 64 (= R) is refused alike, not fatally."""
    got: dict[int, list[str]] = {}
    answered: dict[int, msg.Reply] = {}
    for n, (config, service) in organisations.items():
        probes = [
            paillier_input(service, r, with_bound(honest(), "u_sum", bound))
            for r, bound in enumerate((59.5, 60.5, 61.5, 63.9), start=1)
        ]
        fake = run(
            config, [declare(protection="paillier"), *probes,
                     paillier_input(service, 5, honest())], service,
        )
        got[n] = [c.reply.model_dump_json() for c in fake.contributions[:-1]]
        answered[n] = fake.contributions[-1].reply
    assert got[60] == got[61]
    for r in got[60][1:]:
        refusal = msg.RefusalReply.model_validate_json(r)
        assert not refusal.fatal
        assert "field 'u_sum' of a 'fcm_sums' sum is encoded under bound" in refusal.reason
        assert "below 64.0, the least this participant's declared row_bound=64" in refusal.reason
    assert all(isinstance(r, msg.PaillierInputReply) for r in answered.values())


def fuzzy_db(centers: list[list[float]]) -> msg.StatisticTask:
    return msg.StatisticTask(name="fuzzy_db_sums", centers=wire(centers),
                             params={"m": 2.0, "q": 2.0})


FAR = fuzzy_db([[40.0, 0.0], [-40.0, 40.0]])


@pytest.mark.parametrize(
    ("statistic", "value_bound", "refused"),
    [
        # the moment sums' point beyond 2B: |x − s| <= B + |s| <= 3·|s|/2 per coordinate
        (msg.StatisticTask.of("moment_sums", wire([[40.0, 0.0]])), B, True),
        (msg.StatisticTask.of("moment_sums", wire([[40.0, 0.0]])), 20.0, False),
        # centers beyond 2B: distances <= B + |c| <= 3·|c|/2 per coordinate
        (FAR, B, True),
        (FAR, 20.0, False),
        (fuzzy_db([[16.0, 0.0], [-16.0, 16.0]]), B, False),
    ],
    ids=["far-shift", "far-shift-honest", "far-centers", "far-centers-honest", "centers-2B"],
)
def test_the_task_b_follows_its_shift_and_centers(
    statistic: msg.SumTaskSpec, value_bound: float, refused: bool
) -> None:
    """An honest coordinator's B is at least the largest declared (>= ours) and its centers
    (the moment sums' point too) within [−2B, 2B]: the floor at max(B, |c|/2) is never above
    its bounds, and the values of rows true to the declaration never above the floor."""
    spec = msg.SecureInputTask(round=1, cohort=ROSTER, statistic=statistic,
                               encoding=honest(statistic, value_bound=value_bound))
    declared_terms = terms(protection="masking")
    if refused:
        with pytest.raises(RefusedError, match="is encoded under bound"):
            require_task(declared_terms, "ffcm", spec, OWN)
    else:
        require_task(declared_terms, "ffcm", spec, OWN)
    # And the participant's values are within the floor whatever its rows in [-B, B].
    rng = np.random.default_rng(3)
    local = LocalParticipant(rng.choice([-B, B], size=(64, 2)), name="p",
                             policy=Policy(value_bound=B))
    floor = encoding_floor(declared_terms, statistic, OWN)
    reply = dispatch.answer(local, statistic)
    for name, value in msg.summands(reply).items():
        assert np.max(np.abs(value)) <= floor[name]


def test_standardised_values_are_bounded_by_the_mean_and_scale_applied() -> None:
    mean, scale = (2.0, -1.0), (0.5, 4.0)
    own = OwnBounds.of(DECLARED, 2, [(mean, scale)])
    assert own.value_bound == standardised_bound(B, mean, scale) == (B + 2.0) / 0.5
    statistic = msg.StatisticTask.of("fcm_sums", wire([[0.0, 0.0]]), m=2.0)
    assert encoding_floor(terms(), statistic, own)["weighted_sum"] == 64 * 20.0
    # A coordinator's B below it is refused; its honest B_z (>= ours) is not.
    spec = msg.SecureInputTask(round=1, cohort=ROSTER, statistic=statistic,
                               encoding=honest(statistic, value_bound=B))
    with pytest.raises(RefusedError, match=r"value bound 20\.0"):
        require_task(terms(protection="masking"), "ffcm", spec, own)
    ok = spec.model_copy(update={"encoding": honest(statistic, value_bound=20.0)})
    require_task(terms(protection="masking"), "ffcm", ok, own)


def test_center_sums_weights_are_bounded_by_the_held_centers() -> None:
    """W is coordinator-chosen too: the k-means holds weigh local means by their counts
    (W >= R, or the weights give N_l away), FedFCM holds K centers of weight 1 (W >= K)."""
    centers = np.zeros((1, 2, 2))
    holds: list[tuple[msg.Algorithm, msg.TaskSpec, float]] = [
        ("fkm", msg.HoldKmeansInitTask(k=2, seed=0), 64.0),
        ("fedfcm", msg.HoldLocalFcmTask(centers=wire(np.full((3, 2), 30.0)), m=2.0,
                                        tol=1e-6, max_iter=5), 3.0),
    ]
    for algorithm, hold, weight in holds:
        held = held_bounds(hold, OWN)
        assert held is not None and held[0] == weight
        own = OwnBounds.of(DECLARED, 2, held=held)
        statistic = msg.StatisticTask.of("center_sums", centers, weight_bound=weight)
        job = terms(algorithm, protection="masking")
        # The held objective is J_m of the hold's centers (|c| = 30): B = 15, not 8.
        encoding = honest(statistic, value_bound=max(B, held[1]))
        spec = msg.SecureInputTask(round=1, cohort=ROSTER, statistic=statistic,
                                   encoding=encoding)
        require_task(job, algorithm, spec, own)
        low = msg.StatisticTask.of("center_sums", centers, weight_bound=weight - 1)
        crafted = spec.model_copy(update={
            "statistic": low, "encoding": honest(low, value_bound=max(B, held[1]))})
        with pytest.raises(RefusedError, match="of a 'center_sums' sum is encoded under bound"):
            require_task(job, algorithm, crafted, own)


# -- one fatal refusal ends the job here -----------------------------------------------------------
def test_after_a_fatal_over_bound_refusal_every_task_of_the_job_is_refused(
    organisations: dict[int, tuple[Path, Counting]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a false declaration can now exceed a bound; the refusal that says so is the
    participant's last word in the job, across a restart too (the mark is saved)."""
    config, service = organisations[60]
    real = dispatch.execute

    def over(local: Any, t: msg.Task, secure: Any = None) -> msg.Reply:
        if isinstance(t.spec, msg.PaillierInputTask):
            error = BoundError("u_sum", 64.0, over=1, largest=65.0)
            return dispatch.over_bound_refusal(error, participant="p", job=t.job_id)
        return real(local, t, secure)

    monkeypatch.setattr(agent_module, "execute", over)
    fake = run(config, [
        declare(protection="paillier"),
        paillier_input(service, 1, honest()),
        task(2, msg.StatisticTask.of("moment_sums", wire([[0.0, 0.0]]))),
    ], service)
    first = [c.reply for c in fake.contributions]
    assert isinstance(first[1], msg.RefusalReply) and first[1].fatal
    assert first[2] == msg.RefusalReply(reason=OVER_BOUND_BEFORE, fatal=True)
    saved = json.loads((config.parent / "state" / "jobs" / f"{JOB}.json").read_text())
    assert JobState.from_json(saved).over_bound
    monkeypatch.setattr(agent_module, "execute", real)
    again = run(config, [paillier_input(service, 3, honest())], service)
    assert again.contributions[0].reply == msg.RefusalReply(reason=OVER_BOUND_BEFORE, fatal=True)
