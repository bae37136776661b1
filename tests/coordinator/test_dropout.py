"""A participant that stops answering mid-job: left out after one timeout, the job finishes.

The job runs over :class:`RemoteParticipant` proxies and a loopback channel (every message in
its JSON wire form, secure-sum stages answered by each participant's session); from some task
on, one participant's tasks time out. It must be asked exactly once after it stopped (one
timeout, not one per round), the later rounds and the validation run over the participants
left, and the result must say so. The FedFuzzDB of a K validated after the dropout must equal
the central index over the survivors' pooled rows. A dropout at the declaration, the count,
during standardisation or in the sweep's initial box gives the result of a job over the
survivors alone, without the counting service's total; fewer than three left fails the job.
Under protection, a dropout after a statistic over everyone was released (the count total, a
moment sum) stops the job instead: a sum over the survivors would give the dropped
participant's statistics (its N_l among them) by difference (issue 20).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from fedclust.coordinator.broker import TaskTimeoutError
from fedclust.coordinator.job import JobOutcome, result_document, run_job
from fedclust.coordinator.remote import RemoteParticipant
from fedclust.coordinator.secure_sum import MaskedSummation
from fedclust.core.errors import RefusedError
from fedclust.crypto.masking import IdentityKey
from fedclust.participant.dispatch import execute
from fedclust.participant.local import LocalParticipant
from fedclust.participant.secure import PeerPins, SecureSession
from fedclust.protocol.maths.validity import soft_davies_bouldin
from fedclust.protocol.wire import messages as msg
from fedclust.simulate import CountingService

NAMES = [f"org-{i}" for i in range(4)]
GONE = "org-2"
JOB = "job-1"


class DroppingChannel:
    """A loopback channel (tasks and replies through their JSON form) on which ``who`` times
    out from its task ``after`` on; ``sessions`` answer the secure-sum stages."""

    def __init__(self, locals_: dict[str, LocalParticipant], algorithm: msg.AnyAlgorithm,
                 *, who: str, after: int, sessions: dict[str, SecureSession] | None = None
                 ) -> None:
        self._locals, self._algorithm, self._sessions = locals_, algorithm, sessions or {}
        self.who, self.after = who, after
        self._next: dict[str, int] = {}
        self.timeouts = 0
        self.missed: list[msg.TaskSpec] = []  # the tasks that timed out

    def ask(self, participant: str, spec: msg.TaskSpec) -> msg.Reply:
        task_id = self._next.get(participant, 0)
        if participant == self.who and task_id >= self.after:
            self.timeouts += 1
            self.missed.append(spec)
            raise TaskTimeoutError(
                f"participant {participant!r} did not answer task {self.after} within 1 s"
            )
        self._next[participant] = task_id + 1
        task = msg.Task(job_id=JOB, task_id=task_id, algorithm=self._algorithm, spec=spec)
        local = self._locals[participant]
        reply = execute(local, msg.Task.model_validate_json(task.model_dump_json()),
                        self._sessions.get(participant))
        body = msg.Contribution(job_id=JOB, task_id=task_id, reply=reply).model_dump_json()
        contribution = msg.Contribution.model_validate_json(body)
        msg.check_reply(spec, contribution.reply, local.n_features)
        return contribution.reply


class Counter(CountingService):
    """The in-process counting service, recording how often its total was released."""

    released = 0

    def total(self) -> int:
        self.released += 1
        return super().total()


def _parts() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    centers = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    return [
        np.concatenate([c + rng.normal(scale=0.6, size=(40 + 7 * i, 2)) for c in centers])
        for i in range(len(NAMES))
    ]


@pytest.mark.parametrize(("algorithm", "after"), [("ffcm", 12), ("fkm", 6), ("fedfcm", 5)])
def test_a_silent_participant_is_left_out_after_one_timeout(
    algorithm: msg.Algorithm, after: int
) -> None:
    parts = _parts()
    counter = CountingService(NAMES)
    locals_ = {
        n: LocalParticipant(X, name=n, count_sink=counter.report)
        for n, X in zip(NAMES, parts, strict=True)
    }
    channel = DroppingChannel(locals_, algorithm, who=GONE, after=after)
    remotes = [RemoteParticipant(n, channel=channel, n_features=2) for n in NAMES]
    spec = msg.JobCreate(algorithm=algorithm, participants=NAMES, k_range=(2, 4), seed=3,
                         protection="none")
    doc = result_document(run_job(remotes, spec, total_count=counter.total), spec)

    assert channel.timeouts == 1  # asked once after it stopped, never again
    assert any(f"participant '{GONE}' dropped out" in n for n in doc.notes), doc.notes
    left = [f"K={e.k}: FedFuzzDB over the participants left" for e in doc.sweep]
    validated_after = [e for e, note in zip(doc.sweep, left, strict=True)
                       if any(n.startswith(note) for n in doc.notes)]
    assert validated_after, doc.notes  # the dropout came before some validation
    survivors = np.concatenate([X for n, X in zip(NAMES, parts, strict=True) if n != GONE])
    for entry in validated_after:  # over the survivors' rows, with their N
        centers = np.array(entry.centers, dtype=np.float64)
        assert entry.fed_fuzzy_db == pytest.approx(
            soft_davies_bouldin(survivors, centers, m=spec.m), rel=1e-9
        )
    assert all(e.simplified_silhouette is not None for e in doc.sweep)


@dataclass(frozen=True)
class Run:
    """One job over the loopback channel: its outcome, result document, channel, counter."""

    outcome: JobOutcome
    doc: msg.ResultDocument
    channel: DroppingChannel
    counter: Counter


def _job(
    names: Sequence[str], spec: msg.JobCreate, *, who: str = GONE, after: int = 10**6
) -> Run:
    """Run ``spec`` over ``names`` (their parts of :func:`_parts`), ``who`` silent from task
    ``after`` on."""
    parts = dict(zip(NAMES, _parts(), strict=True))
    counter = Counter(names)
    locals_ = {n: LocalParticipant(parts[n], name=n, count_sink=counter.report) for n in names}
    sessions = summation = None
    if spec.protection == "masking":
        keys = {n: IdentityKey.generate() for n in names}
        sessions = {
            n: SecureSession(p, participant_id=n, job_id=JOB, identity=keys[n], pins=PeerPins())
            for n, p in locals_.items()
        }
        summation = MaskedSummation(
            JOB, {n: k.public_bytes() for n, k in keys.items()}, concurrent=False
        )
    channel = DroppingChannel(locals_, spec.algorithm, who=who, after=after, sessions=sessions)
    remotes = [RemoteParticipant(n, channel=channel, n_features=2) for n in names]
    outcome = run_job(remotes, spec, total_count=counter.total, summation=summation)
    return Run(outcome, result_document(outcome, spec), channel, counter)


def _spec(
    names: Sequence[str], protection: msg.ProtectionScheme, *, standardise: bool = True
) -> msg.JobCreate:
    return msg.JobCreate(algorithm="ffcm", participants=list(names), k_range=(2, 3), seed=3,
                         standardise=standardise, protection=protection)


# Tasks to one participant of a standardised masked job: 0 declare, 1 report_count, 2-3 key
# setup, 4-5 moment sums (masked input, unmasking), 6-7 shifted moment sums, 8 apply; in the
# clear: 0 declare, 1 report_count, 2 moment sums, 3 shifted moment sums, 4 apply. Without
# standardisation the moment sums after the count are the sweep's initial box ("box").
DROPS = {
    ("none", "declaration"): 0, ("none", "count"): 1, ("none", "moments"): 2,
    ("none", "shifted moments"): 3, ("none", "box"): 2,
    ("masking", "declaration"): 0, ("masking", "count"): 1, ("masking", "moments"): 4,
    ("masking", "shifted moments"): 6, ("masking", "box"): 4,
}


def _what(spec: msg.TaskSpec) -> tuple[str, str | None]:
    """What a task computes (``msg.task_name``) and, for a masked input, the statistic summed."""
    summed = msg.task_name(spec.statistic) if isinstance(spec, msg.SecureInputTask) else None
    return msg.task_name(spec), summed


@pytest.mark.parametrize(
    ("protection", "stage"),
    [("none", s) for s in ("declaration", "count", "moments", "shifted moments", "box")]
    + [("masking", "declaration"), ("masking", "count")],
)
def test_a_dropout_before_the_sweep_gives_the_survivors_job(
    protection: msg.ProtectionScheme, stage: str
) -> None:
    """At the declaration, the count, either standardisation round, or (unstandardised) the
    sweep's initial box: the job is that of the survivors alone. Under protection only
    before anything over everyone was released (the declaration, the count)."""
    standardise = stage != "box"
    run = _job(NAMES, _spec(NAMES, protection, standardise=standardise),
               after=DROPS[protection, stage])
    doc, channel, counter = run.doc, run.channel, run.counter

    missed = _what(channel.missed[0])
    expected: tuple[str, str | None] = (
        ("declare", None) if stage == "declaration"
        else ("report_count", None) if stage == "count"
        else ("moment_sums", None) if protection == "none"
        else ("secure_input", "moment_sums")
    )
    assert missed == expected and channel.timeouts == 1
    assert any(n.startswith(f"participant '{GONE}' dropped out") for n in doc.notes), doc.notes
    # The survivors' ΣN came from their own moment sums. After a dropout at the declaration
    # or the count the counting service released no total (it could not: a count is
    # missing); else it did, once everyone had reported, and the note says what the two
    # totals tell together.
    left = [n for n in doc.notes if n.startswith("ΣN of the participants left (org-0, org-1, "
                                                  "org-3) from their moment sums")]
    assert len(left) == 1, doc.notes
    before_count = stage in ("declaration", "count")
    assert counter.released == (0 if before_count else 1)
    assert ("the rows of those who dropped out in between together" in left[0]) == (
        not before_count
    )

    survivors = [n for n in NAMES if n != GONE]
    if standardise:
        pooled = np.concatenate([X for n, X in zip(NAMES, _parts(), strict=True) if n != GONE])
        assert run.outcome.mean is not None and run.outcome.scale is not None
        np.testing.assert_allclose(run.outcome.mean, pooled.mean(axis=0), rtol=1e-9)
        np.testing.assert_allclose(run.outcome.scale, pooled.std(axis=0), rtol=1e-9)
    alone = _job(survivors, _spec(survivors, protection, standardise=standardise)).doc
    assert doc.k_selected == alone.k_selected
    for entry, reference in zip(doc.sweep, alone.sweep, strict=True):
        np.testing.assert_allclose(np.array(entry.centers, dtype=np.float64),
                                   np.array(reference.centers, dtype=np.float64), rtol=1e-9)
        assert entry.fed_fuzzy_db == pytest.approx(reference.fed_fuzzy_db, rel=1e-9)
        assert entry.simplified_silhouette == pytest.approx(reference.simplified_silhouette,
                                                            rel=1e-9)


@pytest.mark.parametrize("stage", ["moments", "shifted moments", "box"])
def test_a_forced_dropout_after_a_release_stops_a_protected_job(stage: str) -> None:
    """The dropout attack of issue 20: the total over everyone is out (and, for the shifted
    moments, a masked sum over everyone too); the coordinator could force org-2 out by
    withholding its task and read N_org-2 as that total minus the survivors' summed
    memberships. Now nothing over the survivors is summed: the job stops with one line."""
    with pytest.raises(RefusedError) as info:
        _job(NAMES, _spec(NAMES, "masking", standardise=stage != "box"),
             after=DROPS["masking", stage])
    assert str(info.value) == (
        "the 'moment_sums' sum over the 3 participants left would reveal the statistics of "
        "'org-2' by difference with what was released over more participants before (fewer "
        "than 3 apart); the job stops here, and nothing over those left is released"
    )


def test_a_dropout_while_the_scaling_is_applied_leaves_the_others_scaled_by_everyone() -> None:
    run = _job(NAMES, _spec(NAMES, "none"), after=4)

    assert [s.kind for s in run.channel.missed] == ["apply_standardisation"]
    assert any(n.startswith(f"participant '{GONE}' dropped out during standardisation")
               for n in run.doc.notes), run.doc.notes
    assert run.counter.released == 1  # the total over everyone, for everyone's moments
    pooled = np.concatenate(_parts())  # the survivors cannot be scaled a second time
    assert run.outcome.mean is not None and run.outcome.scale is not None
    np.testing.assert_allclose(run.outcome.mean, pooled.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(run.outcome.scale, pooled.std(axis=0), rtol=1e-12)
    assert all(e.simplified_silhouette is not None for e in run.doc.sweep)


@pytest.mark.parametrize("protection", ["none", "masking"])
def test_a_dropout_leaving_fewer_than_three_fails_the_job_in_one_line(
    protection: msg.ProtectionScheme,
) -> None:
    names = NAMES[:3]
    spec = msg.JobCreate(algorithm="ffcm", participants=names, k=2, protection=protection)
    with pytest.raises(RefusedError) as info:
        _job(names, spec, after=1)
    assert str(info.value) == (
        "only 2 participant(s) left after 'org-2' dropped out; a job goes on after dropouts "
        "only with at least 3 participants"
    )
