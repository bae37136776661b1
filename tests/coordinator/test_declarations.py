"""The refusal oracle, replayed (issue 9): whatever the coordinator sees of a job — its outcome,
its error, every refusal — is a function of the job and the participants' declared bounds.

Two federations hold different row counts in the same declared buckets (and the same declared
value bounds). A series of jobs with varied ``max_rows``/``value_bound`` overrides and K runs
over both; before the declarations, twelve such jobs bounded an N_l to an interval (a
participant refused a value over ``max_rows``, and said how many) and the exact-FCM size rule
answered one yes/no question about N_l per K.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from fedclust.coordinator.job import run_job
from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.data.federations import Federation
from fedclust.inprocess import run_in_process
from fedclust.participant.dispatch import OVER_BOUND_REASON
from fedclust.participant.local import LocalParticipant
from fedclust.protocol.maths.declaration import Declaration
from fedclust.protocol.wire.messages import JobCreate, ProtectionScheme
from fedclust.simulate import CountingService, _protected, job_spec, simulate

# Same buckets (64, 128, 128) and value bound (1) in both; row counts differ.
SIZES = {"A": (37, 77, 101), "B": (59, 99, 123)}
SECRETS = {n for sizes in SIZES.values() for n in (*sizes, sum(sizes))}

# (k, max_rows, value_bound, standardise, protection)
JOBS: list[tuple[int, int | None, float | None, bool, ProtectionScheme]] = [
    (2, None, None, False, "masking"),
    (3, 64, None, False, "masking"),  # below participant-1's declared 128
    (3, 127, None, False, "masking"),
    (3, 128, None, False, "masking"),
    (5, 1000, None, False, "masking"),
    (21, None, None, False, "masking"),  # the largest K bucket 64 allows (33·2 > 21·3)
    (22, None, None, False, "masking"),  # N = 59 would pass the paper's rule, N = 37 not
    (30, 1000, None, False, "masking"),  # likewise (2N > 90)
    (4, None, 0.5, False, "masking"),  # below the declared value bound 1
    (4, None, 1.0, False, "masking"),
    (4, 200, None, True, "masking"),
    (3, 100, None, False, "paillier"),
    (3, None, None, True, "paillier"),
]


def federation(which: str) -> Federation:
    rng = np.random.default_rng(7)
    return Federation(which, tuple(rng.uniform(-1.0, 1.0, size=(n, 2)) for n in SIZES[which]))


def seen_by_the_coordinator(which: str, job: tuple[Any, ...]) -> tuple[str, ...]:
    k, max_rows, value_bound, standardise, protection = job
    try:
        report = simulate(
            federation(which), algorithm="ffcm", ks=[k], seed=3, max_rounds=3,
            standardise=standardise, protection=protection, max_rows=max_rows,
            value_bound=value_bound,
        )
    except (RefusedError, ProtocolError, ValueError) as exc:
        return ("failed", type(exc).__name__, str(exc))
    refusals = [n for n in report.outcome.secure_notes + report.sweep.notes
                if "refus" in n or "left a secure sum" in n or "dropped" in n]
    return ("succeeded", *refusals)


def test_what_the_coordinator_sees_is_the_same_for_both_federations() -> None:
    seen = {which: [seen_by_the_coordinator(which, job) for job in JOBS] for which in SIZES}
    assert seen["A"] == seen["B"]
    outcomes = [s[0] for s in seen["A"]]
    assert outcomes.count("failed") == 6, seen["A"]  # the oracle's questions now fail alike
    text = " ".join(m for s in seen["A"] + seen["B"] for m in s)
    assert not {int(n) for n in re.findall(r"\d+", text)} & SECRETS
    assert "participant 'participant-1' declares row_bound=128, above the job's max_rows=64" in text
    assert "participant 'participant-0' declares row_bound=64 (33 to 64 rows)" in text
    assert "declares value_bound=1.0, above the job's value_bound=0.5" in text


@pytest.mark.parametrize("protection", ["masking", "paillier"])
def test_a_wrong_declaration_fails_the_job_saying_nothing_of_the_data(
    protection: ProtectionScheme,
) -> None:
    rng = np.random.default_rng(1)
    parts = [rng.uniform(-1.0, 1.0, size=(50, 2)) for _ in range(3)]
    parts[1] *= 1000.0  # far above the bound participant-1 is made to declare
    spec = job_spec(Federation("wrong", tuple(parts)), algorithm="ffcm", ks=[2], seed=0,
                    max_rounds=2, protection=protection)
    counter = CountingService(spec.participants)
    locals_ = [
        LocalParticipant(X, name=name, count_sink=counter.report)
        for name, X in zip(spec.participants, parts, strict=True)
    ]
    locals_[1].declaration = Declaration(
        row_bound=64, value_bound=1.0, row_bound_derived=False, value_bound_derived=False,
        enforces_fcm_rule=True,
    )
    members, summation = _protected(spec, locals_)
    with pytest.raises(ProtocolError) as info:
        run_job(members, spec, total_count=counter.total, summation=summation)
    assert str(info.value) == f"participant 'participant-1': {OVER_BOUND_REASON}"
    assert re.search(r"\d", OVER_BOUND_REASON) is None  # no count, no magnitude, no field


def test_an_override_on_standardised_values_is_checked_against_the_implied_bound() -> None:
    fed = federation("A")
    with pytest.raises(ValueError, match=r"the job's value_bound=0.5 is below \d") as info:
        simulate(fed, algorithm="ffcm", ks=[2], seed=0, max_rounds=2, standardise=True,
                 value_bound=0.5)
    assert "--value-bound" in str(info.value)
    report = simulate(fed, algorithm="ffcm", ks=[2], seed=0, max_rounds=2, standardise=True,
                      value_bound=50.0)
    assert report.sweep.entries[0].result.n_rounds == 2


def test_the_service_fails_alike_and_lists_the_declarations_as_declared() -> None:
    errors = {}
    for which in SIZES:
        fed = federation(which)
        spec = JobCreate(algorithm="ffcm", participants=["p0", "p1", "p2"], k=3, seed=0,
                         max_rounds=2, max_rows=100)
        with pytest.raises(RuntimeError, match="failed") as info:
            run_in_process(fed, spec)
        errors[which] = re.sub(r"job \S+ failed", "job failed", str(info.value))
    assert errors["A"] == errors["B"]
    assert "invalid job: participant 'p1' declares row_bound=128" in errors["A"]

    ledgers = []
    spec = JobCreate(algorithm="ffcm", participants=["p0", "p1", "p2"], k=3, seed=0,
                     max_rounds=2)
    run_in_process(federation("A"), spec,
                   on_finished=lambda client, job: ledgers.append(client.disclosures(job.id)))
    declared = [d for d in ledgers[0].disclosures if d.reply_kind == "declaration"]
    assert len(declared) == 3
    for d in declared:
        protections = {f.name: f.protection for f in d.fields}
        assert protections["row_bound"] == protections["value_bound"] == "declared"
        assert protections["row_bound_source"] == "plain"
    assert any(n.startswith("Declared public bounds") for n in ledgers[0].notes)


@pytest.mark.parametrize("which", ["A", "B"])
def test_a_k_above_the_declared_bucket_fails_fedfcm_before_any_local_fcm(which: str) -> None:
    # A local FCM with K centers needs K rows. Participant-0's bucket 64 guarantees 33 rows:
    # K = 34 fails the job at the coordinator with public numbers only (before, the
    # participant with 37 rows failed and the one with 59 did not: a yes/no about N_l).
    with pytest.raises(ValueError) as failed:
        simulate(federation(which), algorithm="fedfcm", ks=[34], seed=0, max_rounds=2)
    message = str(failed.value)
    assert "participant-0" in message and "row_bound=64 (33 to 64 rows)" in message
    assert "at most 33" in message
    assert not set(re.findall(r"\d+", message)) & {str(n) for n in SECRETS}
    report = simulate(federation(which), algorithm="fedfcm", ks=[33], seed=0, max_rounds=2)
    assert report.sweep.entries[0].result.centers.shape[0] <= 33
