"""The participant agent against a fake coordinator (httpx.MockTransport) and the real
counting service (in process): its config, its replies, its refusals, where N_l goes, its
saved standardisation and its round limit."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from numpy.typing import NDArray

from fedclust.counting.app import create_app
from fedclust.counting.settings import CountingSettings, ParticipantCredential
from fedclust.crypto.masking import IdentityKey
from fedclust.crypto.tokens import token_sha256
from fedclust.participant.agent import AgentError, run_agent
from fedclust.participant.config import DataSource, ParticipantConfig, load_data
from fedclust.participant.dispatch import execute
from fedclust.participant.local import LocalParticipant
from fedclust.participant.policy import Policy
from fedclust.protocol import algorithms
from fedclust.protocol.maths.rows import Rows
from fedclust.protocol.wire import messages as msg
from tests.counting.asgi import SyncASGITransport

TOKEN = "token-of-hospital-a"
COORDINATOR_TOKEN = "token-of-the-coordinator"
ME = "hospital-a"
JOB = "job-1"
N_L = 137  # rows held by hospital-a; must never reach the coordinator


def blobs(n: int = N_L, seed: int = 0) -> NDArray[np.float64]:
    rng = np.random.default_rng(seed)
    half = n // 2
    return np.vstack([rng.normal(0.0, 0.3, (half, 2)), rng.normal(3.0, 0.3, (n - half, 2))])


#: The [policy] line of the test agents: they take part in the unprotected jobs these tests
#: declare (a default policy refuses them: tests/participant/test_terms.py).
OPT_IN_NONE = 'protections = ["masking", "none", "paillier"]\n'


def write_config(
    folder: Path,
    *,
    policy: str = "",
    data: str = '[data]\npath = "rows.csv"\ncolumns = ["x", "y"]\n',
    participant: str | None = None,
    opt_in_none: bool = True,
) -> Path:
    """participant.toml in ``folder``; ``policy`` (a [policy] table or nothing) gets the
    :data:`OPT_IN_NONE` line unless ``opt_in_none`` is false."""
    if opt_in_none:
        policy = "[policy]\n" + OPT_IN_NONE + policy.removeprefix("[policy]\n")
    if participant is None:
        participant = (
            f'[participant]\nid = "{ME}"\ncoordinator_url = "http://coordinator"\n'
            f'counting_url = "http://counting"\ntoken = "{TOKEN}"\nstate_dir = "state"\n'
        )
    file = folder / "participant.toml"
    file.write_text(participant + data + policy, encoding="utf-8")
    return file


def write_rows(folder: Path, X: NDArray[np.float64]) -> None:
    lines = ["x,y,label"] + [f"{float(a)!r},{float(b)!r},{i % 2}" for i, (a, b) in enumerate(X)]
    (folder / "rows.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def task(task_id: int, spec: Any, algorithm: msg.AnyAlgorithm = "ffcm", job: str = JOB) -> msg.Task:
    return msg.Task(job_id=job, task_id=task_id, algorithm=algorithm, spec=spec)


def wire(a: Any) -> msg.WireArray:
    return msg.WireArray.of(np.asarray(a, dtype=np.float64))


ROSTER = [ME, "hospital-b", "hospital-c"]


def terms(algorithm: msg.AnyAlgorithm = "ffcm", **fields: Any) -> msg.JobCreate:
    """The terms of a test job over :data:`ROSTER`: K 2..3, unprotected (every statistic a
    bare task), standardising and with a local K range unless ``fields`` say otherwise."""
    base: dict[str, Any] = {
        "algorithm": algorithm, "participants": ROSTER, "k_range": (2, 3),
        "protection": "none", "standardise": True, "local_k_range": (2, 3),
    }
    return msg.JobCreate.model_validate(base | fields)


def declared(tasks: Sequence[msg.Task], **fields: Any) -> list[msg.Task]:
    """``tasks`` with each job's declare task (its algorithm's :func:`terms`) before its
    first task."""
    out: list[msg.Task] = []
    seen: set[str] = set()
    for t in tasks:
        if t.job_id not in seen:
            seen.add(t.job_id)
            spec = msg.DeclareTask(terms=terms(t.algorithm, **fields))
            out.append(task(10_000, spec, t.algorithm, job=t.job_id))
        out.append(t)
    return out


CENTERS = wire([[0.0, 0.0], [3.0, 3.0]])


class FakeCoordinator:
    """Serves ``tasks`` one at a time (the head until it is answered); records every body.

    Sets ``stop`` once every task is answered, so :func:`run_agent` returns.
    """

    def __init__(self, tasks: Sequence[msg.Task | dict[str, Any]], stop: threading.Event) -> None:
        self.queue: deque[msg.Task | dict[str, Any]] = deque(tasks)
        self.stop = stop
        self.bodies: list[bytes] = []
        self.enrolments: list[msg.Enrolment] = []
        self.contributions: list[msg.Contribution] = []
        self.failures: deque[int | Exception] = deque()  # injected: a status or an exception

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.content)
        if self.failures:
            failure = self.failures.popleft()
            if isinstance(failure, Exception):
                raise failure
            return httpx.Response(failure, json={"detail": "injected"})
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return httpx.Response(401, json={"detail": "unknown token"})
        path = request.url.path
        if path == "/api/v1/participants/enrol":
            enrolment = msg.Enrolment.model_validate_json(request.content)
            self.enrolments.append(enrolment)
            public = msg.ParticipantPublic(
                id=ME, enrolled=True, n_features=enrolment.n_features,
                allowed_algorithms=enrolment.allowed_algorithms,
            )
            return httpx.Response(200, content=public.model_dump_json())
        if path == "/api/v1/tasks/next":
            if not self.queue:
                self.stop.set()
                return httpx.Response(204)
            head = self.queue[0]
            body = head.model_dump_json() if isinstance(head, msg.Task) else json.dumps(head)
            return httpx.Response(200, content=body)
        if path.endswith(("/contribution", "/answer")):  # an answer's next task: poll again
            contribution = msg.Contribution.model_validate_json(request.content)
            head = self.queue[0]
            head_ids = (
                (head.job_id, head.task_id) if isinstance(head, msg.Task)
                else (head["job_id"], head["task_id"])
            )
            assert (contribution.job_id, contribution.task_id) == head_ids
            assert path.rsplit("/", 1)[0] == f"/api/v1/jobs/{head_ids[0]}/tasks/{head_ids[1]}"
            self.queue.popleft()
            self.contributions.append(contribution)
            if path.endswith("/answer"):
                return httpx.Response(204)
            return httpx.Response(202, json={"job_id": head_ids[0], "task_id": head_ids[1]})
        return httpx.Response(404, json={"detail": "no such route"})

    def replies(self) -> list[msg.Reply]:
        return [c.reply for c in self.contributions]


class Counting:
    """The real counting service in process, with ``ME`` and three others enrolled."""

    def __init__(self, db: Path) -> None:
        others = {"hospital-b": "token-b", "hospital-c": "token-c", "hospital-d": "token-d"}
        creds = [ParticipantCredential(id=ME, token_sha256=token_sha256(TOKEN))] + [
            ParticipantCredential(id=p, token_sha256=token_sha256(t)) for p, t in others.items()
        ]
        self.app = create_app(
            CountingSettings(
                coordinator_token_sha256=token_sha256(COORDINATOR_TOKEN),
                participants=tuple(creds),
                database_url=f"sqlite:///{db}",
            )
        )
        self.transport = SyncASGITransport(self.app)

    def put_roster(self, job: str, members: Sequence[str]) -> None:
        with httpx.Client(
            base_url="http://counting/api/v1", transport=self.transport,
            headers={"Authorization": f"Bearer {COORDINATOR_TOKEN}"},
        ) as client:
            body = {"job_id": job, "participants": list(members)}
            assert client.put(f"/jobs/{job}/roster", json=body).status_code == 204

    def reported(self, job: str) -> tuple[int, int]:
        """(reporters, ΣN_l) straight from the service's store."""
        tally = self.app.state.store.tally(job)
        return tally.reporters, tally.total


@pytest.fixture
def counting(tmp_path: Path) -> Iterator[Counting]:
    service = Counting(tmp_path / "counting.db")
    service.put_roster(JOB, [ME, "hospital-b", "hospital-c"])
    yield service
    service.app.state.store.close()


@pytest.fixture(name="X")
def rows_on_disk(tmp_path: Path) -> NDArray[np.float64]:
    """hospital-a's rows, also written to rows.csv beside the config."""
    rows = blobs()
    write_rows(tmp_path, rows)
    return rows


def run(
    config_file: Path, tasks: Sequence[msg.Task | dict[str, Any]], counting: Counting,
    *, failures: Sequence[int | Exception] = (),
) -> FakeCoordinator:
    stop = threading.Event()
    fake = FakeCoordinator(tasks, stop)
    fake.failures.extend(failures)
    run_agent(
        ParticipantConfig.from_file(config_file), stop=stop, transport=fake.transport(),
        counting_transport=counting.transport, retry_initial=0.001, retry_max=0.01,
    )
    return fake


def reference(X: NDArray[np.float64], policy: Policy | None = None) -> LocalParticipant:
    return LocalParticipant(X, name=ME, policy=policy, count_sink=lambda name, n: None)


def dumped(reply: msg.Reply) -> dict[str, Any]:
    return reply.model_dump(mode="json")


# -- configuration --------------------------------------------------------------------------------
def test_config_reads_paths_relative_to_the_file_and_the_policy(tmp_path: Path) -> None:
    file = write_config(
        tmp_path,
        policy='[policy]\nallowed_algorithms = ["fkm", "kfed"]\nmin_cluster_size = 5\n'
        "enforce_fcm_rule = false\nmax_rounds = 7\n",
    )
    config = ParticipantConfig.from_file(file)
    assert config.id == ME
    assert config.state_dir == tmp_path / "state"
    assert config.data == DataSource(path=tmp_path / "rows.csv", columns=("x", "y"))
    assert config.policy == Policy(
        allowed_algorithms=frozenset({"fkm", "kfed"}), min_cluster_size=5,
        enforce_fcm_rule=False, max_rounds=7,
        protections=frozenset({"masking", "none", "paillier"}),  # OPT_IN_NONE
    )
    assert TOKEN not in repr(config)


HEAD = (
    f'[participant]\nid = "{ME}"\ncoordinator_url = "http://c"\ncounting_url = "http://n"\n'
)


@pytest.mark.parametrize(
    ("participant", "data", "policy", "message"),
    [
        (HEAD, '[data]\npath = "rows.csv"\n', "", r"\[participant\] is missing 'token'"),
        (HEAD + 'token = " "\n', '[data]\npath = "rows.csv"\n', "", "token must not be empty"),
        (HEAD + 'token = "t"\n', "", "", r"missing the \[data\] table"),
        (HEAD + 'token = "t"\n', '[data]\npath = "rows.csv"\ncolumns = []\n', "",
         "columns must be a non-empty list"),
        (HEAD + 'token = "t"\n', '[data]\npath = "rows.csv"\n',
         '[policy]\nallowed_algorithms = ["ffcm", "dbscan"]\n', "unknown algorithm.*'dbscan'"),
        (HEAD + 'token = "t"\n', '[data]\npath = "rows.csv"\n', "[policy]\nmax_rounds = 0\n",
         r"\[policy\] max_rounds must be >= 1"),
        (HEAD + 'token = "t"\n', '[data]\npath = "rows.csv"\n', '[policy]\nmax_rounds = "9"\n',
         r"\[policy\] max_rounds must be an integer\."),
        (HEAD + 'token = "t"\nport = 1\n', '[data]\npath = "rows.csv"\n', "",
         r"unknown key\(s\) 'port' in \[participant\]"),
        (HEAD.replace("http://c", "ftp://c") + 'token = "t"\n', '[data]\npath = "r.csv"\n', "",
         "coordinator_url must be an http:// or https:// URL"),
        ("[participant\n", "", "", "not valid TOML"),
    ],
    ids=["no-token", "blank-token", "no-data", "empty-columns", "unknown-algorithm",
         "zero-rounds", "string-rounds", "unknown-key", "bad-url", "bad-toml"],
)
def test_config_errors_name_the_file_and_the_key(
    tmp_path: Path, participant: str, data: str, policy: str, message: str
) -> None:
    file = write_config(tmp_path, participant=participant, data=data, policy=policy)
    with pytest.raises(ValueError, match=message) as info:
        ParticipantConfig.from_file(file)
    assert str(info.value).startswith(str(file))
    assert "token-of" not in str(info.value)


def test_data_files_csv_npy_and_their_errors(tmp_path: Path) -> None:
    rows = blobs(20)
    write_rows(tmp_path, rows)
    csv = load_data(DataSource(tmp_path / "rows.csv", columns=("y", "x")))
    np.testing.assert_array_equal(csv, rows[:, ::-1])  # repr() round-trips floats exactly
    np.save(tmp_path / "rows.npy", np.column_stack([rows, np.arange(20)]))
    npy = load_data(DataSource(tmp_path / "rows.npy", columns=(1, 0)))
    np.testing.assert_array_equal(npy, rows[:, ::-1])
    assert load_data(DataSource(tmp_path / "rows.npy")).shape == (20, 3)
    with pytest.raises(ValueError, match="has no column 'z'"):
        load_data(DataSource(tmp_path / "rows.csv", columns=("x", "z")))
    with pytest.raises(ValueError, match=r"out of range: rows\.npy has 3 columns"):
        load_data(DataSource(tmp_path / "rows.npy", columns=(0, 5)))
    with pytest.raises(ValueError, match="does not exist"):
        load_data(DataSource(tmp_path / "missing.csv"))
    bad = rows.copy()
    bad[3, 0] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    with pytest.raises(ValueError, match="contains NaN or infinity"):
        load_data(DataSource(tmp_path / "nan.npy"))


def test_parquet_without_pyarrow_is_a_clear_error(tmp_path: Path) -> None:
    if importlib.util.find_spec("pyarrow") is not None:
        pytest.skip("pyarrow is installed: Parquet files are read")
    (tmp_path / "rows.parquet").write_bytes(b"PAR1")
    with pytest.raises(ValueError, match="Parquet, which needs the pyarrow package"):
        load_data(DataSource(tmp_path / "rows.parquet"))


# -- the agent ------------------------------------------------------------------------------------
def all_kinds() -> list[msg.Task]:
    """One task of every kind, each algorithm's in its own declared job (ffcm's in JOB)."""
    specs: list[tuple[Any, msg.Algorithm]] = [
        (msg.ReportCountTask(), "ffcm"),
        (msg.StatisticTask.of("moment_sums", np.zeros((1, 2))), "ffcm"),
        (msg.StatisticTask.of("moment_sums", np.ones((1, 2))), "ffcm"),
        (msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0), "ffcm"),
        (msg.LocalFcmTask(centers=CENTERS, m=2.0, tol=1e-6, max_iter=50), "fedfcm-avg"),
        (msg.StatisticTask(name="fuzzy_db_sums", centers=CENTERS, params={"m": 2.0, "q": 2.0}),
         "fedfcm"),
        (msg.StatisticTask(name="silhouette_sums", centers=CENTERS), "fedfcm"),
        (msg.HoldKmeansInitTask(k=2, seed=3), "fkm"),
        (msg.StatisticTask.of("center_sums", np.array([[[0.0, 0.0], [3.0, 3.0]]])), "fkm"),
        (msg.HoldKmeansStepTask(centers=CENTERS), "fkm"),
        (msg.StatisticTask.of("center_scatter", np.array([[[0.0, 0.0], [3.0, 3.0]]])), "fkm"),
        (msg.KfedCentersTask(k_local=2, seed=4), "kfed"),
        (msg.KfedDennisCentersTask(k_local=2, seed=4), "kfed-dennis"),
        (msg.LocalKTask(k_min=2, k_max=3, m=2.0, seed=5), "fedfcm"),
    ]
    return declared([
        task(i, spec, algorithm, job=JOB if algorithm == "ffcm" else f"job-{algorithm}")
        for i, (spec, algorithm) in enumerate(specs)
    ])


def test_the_agent_answers_as_dispatch_execute_does(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    tasks = all_kinds()
    fake = run(write_config(tmp_path), tasks, counting)
    assert fake.enrolments == [
        msg.Enrolment(
            n_features=2, allowed_algorithms=sorted(algorithms.names()),
            agent_version=fake.enrolments[0].agent_version,
            identity_key=fake.enrolments[0].identity_key,
        )
    ]
    # The identity key sent is the public half of the key file the agent created.
    key = IdentityKey.from_private_bytes(
        base64.b64decode((tmp_path / f"identity-{ME}.key").read_text())
    )
    assert fake.enrolments[0].identity_key == base64.b64encode(key.public_bytes()).decode()
    ref = reference(X)
    expected = [dumped(execute(ref, t)) for t in tasks]
    # exact equality: same rows (CSV holds repr() of each float), same code, same seeds
    assert [dumped(r) for r in fake.replies()] == expected
    assert not any(isinstance(r, msg.RefusalReply) for r in fake.replies())


@pytest.mark.parametrize("file", ["rows.csv", "rows.parquet", "rows.npy"])
def test_a_streaming_agent_answers_as_one_holding_its_rows(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting, file: str
) -> None:
    """``[data] stream = true`` re-reads the file for every statistic instead of holding it:
    the same replies, bit for bit (equality over many chunks: tests/protocol/test_rows.py)."""
    if file.endswith(".parquet"):
        pq = pytest.importorskip("pyarrow.parquet")
        pa = pytest.importorskip("pyarrow")
        pq.write_table(pa.table({"x": X[:, 0], "y": X[:, 1]}), tmp_path / file)
    elif file.endswith(".npy"):
        np.save(tmp_path / file, X)
    columns = "" if file.endswith(".npy") else 'columns = ["x", "y"]\n'
    data = f'[data]\npath = "{file}"\n{columns}stream = true\nmemory_mb = 16\n'
    tasks = all_kinds()
    streamed = run(write_config(tmp_path, data=data), tasks, counting)
    ref = reference(X)
    expected = [dumped(execute(ref, t)) for t in tasks]
    assert [dumped(r) for r in streamed.replies()] == expected
    config = ParticipantConfig.from_file(tmp_path / "participant.toml")
    assert config.data.stream and not isinstance(config.data.rows(), Rows)


def test_stream_settings_are_checked(tmp_path: Path) -> None:
    for data, problem in [
        ('stream = "yes"\n', "[data] stream must be true or false."),
        ("stream = true\nmemory_mb = 1\n", "[data] memory_mb must be a whole number"),
        ('stream = true\nlabel_column = "label"\n', "a label_column (for the model-based"),
    ]:
        file = write_config(
            tmp_path, data=f'[data]\npath = "rows.csv"\ncolumns = ["x", "y"]\n{data}'
        )
        with pytest.raises(ValueError) as error:
            ParticipantConfig.from_file(file)
        assert problem in str(error.value)


def _numbers(node: Any) -> Iterator[float]:
    """Every number in a JSON document, including the elements of encoded arrays."""
    if isinstance(node, dict):
        if set(node) == {"dtype", "shape", "data"}:
            raw = base64.b64decode(node["data"])
            yield from np.frombuffer(raw, dtype="<f8" if node["dtype"] == "float64" else "<i8")
            return
        for value in node.values():
            yield from _numbers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _numbers(value)
    elif isinstance(node, int | float) and not isinstance(node, bool):
        yield node


def test_the_count_goes_only_to_the_counting_service(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    tasks = declared([
        task(0, msg.ReportCountTask()),
        task(1, msg.StatisticTask.of("moment_sums", np.zeros((1, 2)))),
        task(2, msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0)),
        task(3, msg.HoldKmeansInitTask(k=2, seed=1), "fkm", job="job-fkm"),
        task(4, msg.StatisticTask.of("center_sums", np.array([[[0.0, 0.0], [3.0, 3.0]]])),
             "fkm", job="job-fkm"),
    ])
    fake = run(write_config(tmp_path), tasks, counting)
    assert dumped(fake.replies()[1]) == {"kind": "ack"}
    assert counting.reported(JOB) == (1, N_L)  # the counting service holds N_l
    bodies = [json.loads(b) for b in fake.bodies if b]
    heads = [b for b in bodies if set(b) == {"seq", "line_sha256", "signature"}]
    assert all(1 < h["seq"] <= 1 + len(tasks) for h in heads)  # audit heads: hashes only
    received = [b for b in bodies if b not in heads]
    assert len(received) == 1 + len(tasks)  # the enrolment and one contribution per task
    numbers = [v for body in received for v in _numbers(body)]
    assert numbers, "the walk found the contributions' numbers"
    assert N_L not in numbers  # neither as a field nor inside an encoded array
    plain = [b for b in received if "n_features" in b or b.get("reply") == {"kind": "ack"}]
    # The enrolment and the report_count and hold_kmeans_init answers: no arrays to hide in.
    assert len(plain) == 3
    assert not any(str(N_L) in json.dumps(b) for b in plain)


def test_a_count_the_counting_service_refuses_becomes_a_refusal(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    counting.put_roster("job-2", ["hospital-b", "hospital-c", "hospital-d"])  # not hospital-a
    tasks = declared([task(0, msg.ReportCountTask(), job="job-2")])
    reply = run(write_config(tmp_path), tasks, counting).replies()[-1]
    assert isinstance(reply, msg.RefusalReply)
    assert "the counting service refused the count of participant 'hospital-a': HTTP 403" in (
        reply.reason
    )
    assert "not on the roster of job 'job-2'" in reply.reason
    assert counting.reported("job-2") == (0, 0)


def test_refusals_carry_the_reason(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    policy = '[policy]\nallowed_algorithms = ["fkm", "ffcm"]\n'
    tasks = [
        task(0, msg.LocalFcmTask(centers=CENTERS, m=2.0, tol=1e-6, max_iter=5), "fedfcm"),
        *declared([
            task(1, msg.StatisticTask.of("silhouette_sums", np.zeros((1, 2)))),  # K < 2
            task(2, msg.StatisticTask.of("fcm_sums", np.zeros((100, 2)), m=2.0)),  # N <= C(F+1)/F
            task(3, msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0)),  # fine: still there
        ], k_range=(2, 100)),
    ]
    fake = run(write_config(tmp_path, policy=policy), tasks, counting)
    replies = [r for r in fake.replies() if not isinstance(r, msg.DeclarationReply)]
    assert all(isinstance(r, msg.RefusalReply) for r in replies[:3])
    reasons = [r.reason for r in replies[:3] if isinstance(r, msg.RefusalReply)]
    assert "'fedfcm' is not allowed by this participant's policy" in reasons[0]
    # An unexpected error is named by type only: its text may describe the data.
    assert "cannot compute this 'silhouette_sums' task (ValueError; details in its log)" in (
        reasons[1]
    )
    assert "n_features" not in reasons[1]
    assert "privacy rule of Corcuera Bárcena et al." in reasons[2]
    assert re.search(rf"\b{len(X)}\b", reasons[2]) is None  # the bound, never N itself
    assert isinstance(replies[3], msg.StatisticReply)


def test_standardisation_is_saved_and_reapplied_after_a_restart(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    mean, scale = X.mean(axis=0), X.std(axis=0)
    apply = task(0, msg.ApplyStandardisationTask(mean=wire(mean), scale=wire(scale)))
    config = write_config(tmp_path)
    first = run(config, declared([apply]), counting)
    assert dumped(first.replies()[1]) == {"kind": "ack"}
    saved = json.loads((tmp_path / "state" / "jobs" / f"{JOB}.json").read_text())
    assert saved["standardisations"][0]["mean"] == mean.tolist()  # exact: JSON floats round-trip
    # a new agent process: the apply task is delivered again (its answer was lost), then work
    # (the job's declared terms were saved with its state)
    sums = task(1, msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0))
    second = run(config, [apply, sums], counting)
    ref = reference(X)
    ref.apply_standardisation(mean, scale)  # once: the repeated task must not apply it twice
    assert dumped(second.replies()[0]) == {"kind": "ack"}
    assert dumped(second.replies()[1]) == dumped(execute(ref, sums))
    assert dumped(second.replies()[1]) != dumped(execute(reference(X), sums))
    # another job starts from the raw rows
    other = run(config, declared([task(0, sums.spec, job="job-9")]), counting)
    assert dumped(other.replies()[1]) == dumped(execute(reference(X), sums))


SILHOUETTE = msg.StatisticTask(name="silhouette_sums", centers=CENTERS)


def test_max_rounds_counts_algorithm_steps_per_job_across_restarts(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    config = write_config(tmp_path, policy="[policy]\nmax_rounds = 2\n")
    step = msg.HoldKmeansStepTask(centers=CENTERS)
    first = run(
        config,
        declared([task(0, step, "fkm"), task(1, SILHOUETTE, "fkm"),
                  task(2, step, "fkm"), task(3, step, "fkm")]),
        counting,
    )
    kinds = [r.kind for r in first.replies()]
    assert kinds == ["declaration", "ack", "statistic", "ack", "refusal"]
    refusal = first.replies()[4]
    assert isinstance(refusal, msg.RefusalReply)
    assert refusal.reason == "round 3 exceeds this participant's max_rounds=2."
    # restarted: the count is remembered; a re-delivered step (id 2) is answered, not counted
    second = run(config, [task(2, step, "fkm"), task(4, step, "fkm")], counting)
    assert [r.kind for r in second.replies()] == ["ack", "refusal"]
    # the limit is per job
    third = run(config, declared([task(0, step, "fkm", job="job-2")]), counting)
    assert [r.kind for r in third.replies()] == ["declaration", "ack"]


def test_model_based_iterations_count_as_rounds(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    pytest.importorskip("torch")
    write_rows(tmp_path, (X - X.min(axis=0)) / np.ptp(X, axis=0))  # FedCRef wants [0, 1]
    config = write_config(tmp_path, policy="[policy]\nmax_rounds = 1\n")
    init = msg.FedCRefInitTask(hidden=(8,), initial="kmeans", k=2, k_max=2, epochs=5, seed=0)
    refine = msg.FedCRefRefineTask(
        models=msg.WireArray.of(np.zeros((0, 42), dtype=np.float32)), seed=0
    )
    fake = run(
        config,
        declared(
            [task(0, init, "fedcref"), task(1, refine, "fedcref"), task(2, refine, "fedcref")],
            k_range=None, standardise=False, local_k_range=None,
            fedcref={"hidden": [8], "local_k": 2, "k_max": 2, "epochs": 5},
        ),
        counting,
    )
    replies = fake.replies()
    assert [r.kind for r in replies] == ["declaration", "fedcref_init", "fedcref_refine", "refusal"]
    refusal = replies[3]
    assert isinstance(refusal, msg.RefusalReply)
    assert refusal.reason == "round 2 exceeds this participant's max_rounds=1."


def test_network_errors_and_5xx_are_retried(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    failures: list[int | Exception] = [
        httpx.ConnectError("refused"), 503, httpx.ReadTimeout("slow"), 502,
    ]
    tasks = declared([task(0, msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0))])
    fake = run(write_config(tmp_path), tasks, counting, failures=failures)
    assert len(fake.enrolments) == 1
    assert dumped(fake.replies()[-1]) == dumped(execute(reference(X), tasks[-1]))


def test_stop_ends_the_agent_while_the_coordinator_is_down(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="fedclust.participant")

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    stop = threading.Event()
    timer = threading.Timer(0.2, stop.set)
    timer.start()
    started = time.monotonic()
    run_agent(
        ParticipantConfig.from_file(write_config(tmp_path)), stop=stop,
        transport=httpx.MockTransport(down), counting_transport=counting.transport,
        retry_initial=0.01, retry_max=0.05,
    )
    timer.join()
    assert time.monotonic() - started < 5.0  # returned soon after stop, without raising
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert retries and all(  # each names the URL it could not reach
        m.startswith("enrolment to http://coordinator/api/v1/participants/enrol failed "
                     "(ConnectError: connection refused); retrying in ")
        for m in retries
    ), retries


def test_a_refused_token_is_a_clear_error(tmp_path: Path, X: NDArray[np.float64]) -> None:
    file = write_config(tmp_path)
    file.write_text(file.read_text().replace(TOKEN, "wrong-token"), encoding="utf-8")
    stop = threading.Event()
    fake = FakeCoordinator([], stop)
    with pytest.raises(AgentError) as info:
        run_agent(ParticipantConfig.from_file(file), stop=stop, transport=fake.transport())
    assert str(info.value) == (
        "the coordinator at http://coordinator refused the token of participant 'hospital-a' "
        "(HTTP 401): check [participant] token and id in its config file."
    )


@pytest.mark.parametrize("placeholder", ["REPLACE-WITH-HOSPITAL-A-TOKEN", "<your token>",
                                         "change-me"])
def test_a_placeholder_token_is_refused_at_start_up(tmp_path: Path, placeholder: str) -> None:
    file = write_config(tmp_path)
    file.write_text(file.read_text().replace(TOKEN, placeholder), encoding="utf-8")
    with pytest.raises(ValueError) as info:
        ParticipantConfig.from_file(file)
    assert str(info.value) == (
        f"{file}: [participant] token is still a placeholder: put in the token the "
        "coordinator's operator issued to this participant."
    )


def test_an_unreadable_task_is_refused_with_the_reason(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    future = {"protocol_version": msg.PROTOCOL_VERSION + 1, "job_id": JOB, "task_id": 0,
              "algorithm": "ffcm", "spec": {"kind": "teleport"}}
    fake = run(write_config(tmp_path), [future], counting)
    reply = fake.replies()[0]
    assert isinstance(reply, msg.RefusalReply)
    assert reply.reason.startswith(
        f"this agent cannot read the task (protocol version {msg.PROTOCOL_VERSION})"
    )
    assert "protocol_version" in reply.reason


def test_a_damaged_saved_state_refuses_that_job_only(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    jobs = tmp_path / "state" / "jobs"
    jobs.mkdir(parents=True)
    (jobs / f"{JOB}.json").write_text("{not json", encoding="utf-8")
    sums = msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0)
    tasks = [task(0, sums), *declared([task(0, sums, job="job-3")])]
    damaged, _, fine = run(write_config(tmp_path), tasks, counting).replies()
    assert isinstance(damaged, msg.RefusalReply)
    assert f"saved state of job '{JOB}'" in damaged.reason and "is damaged" in damaged.reason
    assert dumped(fine) == dumped(execute(reference(X), task(0, sums)))


# -- audit log -------------------------------------------------------------------------------------
class Recording(httpx.BaseTransport):
    """Forwards to ``inner`` and keeps every request body (the counting service's side)."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.bodies: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.read())
        return self.inner.handle_request(request)


def test_the_audit_log_holds_the_hash_of_every_body_received(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    from fedclust.participant.audit import public_key_from, show, verify

    policy = '[policy]\nallowed_algorithms = ["fkm", "ffcm", "kfed"]\n'
    tasks = [
        *[t for t in all_kinds() if t.algorithm in ("fkm", "ffcm", "kfed")],
        task(20, msg.LocalFcmTask(centers=CENTERS, m=2.0, tol=1e-6, max_iter=5), "fedfcm"),
    ]
    config_file = write_config(tmp_path, policy=policy)
    stop = threading.Event()
    fake = FakeCoordinator(tasks, stop)
    fake.failures.extend([503, httpx.ConnectError("down")])  # the enrolment is sent 3 times
    to_counting = Recording(counting.transport)
    run_agent(
        ParticipantConfig.from_file(config_file), stop=stop, transport=fake.transport(),
        counting_transport=to_counting, retry_initial=0.001, retry_max=0.01,
    )
    log = tmp_path / f"audit-{ME}.jsonl"  # the default: beside the config file
    report = verify(log)
    assert report.ok, report
    records = [json.loads(line) for line in log.read_text().splitlines()]

    def digest(body: bytes) -> str:
        return hashlib.sha256(body).hexdigest()

    sent = [b for b in fake.bodies if b]
    assert sent[0] == sent[1] == sent[2]  # a retry resends the same bytes, recorded once
    to_coordinator = [r["sha256"] for r in records if r["recipient"] == "coordinator"]
    assert to_coordinator == [digest(b) for b in sent[2:]]
    assert [r["sha256"] for r in records if r["recipient"] == "counting"] == [
        digest(b) for b in to_counting.bodies
    ] and len(to_counting.bodies) == 1
    whats = [r["what"] for r in records if r["recipient"] == "coordinator"]
    assert [w for w in whats if w != "audit_head"] == ["enrolment"] + ["contribution"] * len(
        tasks
    )
    last = [r for r in records if r["what"] != "audit_head"][-1]
    assert last["kind"] == "refusal" and last["task_id"] == 20
    identity = public_key_from(str(tmp_path / f"identity-{ME}.key"))
    signed = verify(log, public_key=identity)  # every line signed by the agent's identity
    assert signed.ok and signed.signed == len(records), signed
    summary = show(log, job=JOB)
    kinds = {k.kind: k for k in summary.jobs[JOB]["coordinator"]}
    assert kinds["refusal"].messages == 1
    fkm = {k.kind: k for k in show(log, job="job-fkm").jobs["job-fkm"]["coordinator"]}
    shapes = {f.name: f.shapes for f in fkm["statistic"].fields}
    assert shapes["reply.fields.sums"] == ((1, 2, 2),)
    assert [k.what for k in summary.jobs[JOB]["counting"]] == ["count_report"]


def test_a_damaged_audit_log_stops_the_agent_before_it_sends(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    from fedclust.participant.audit import AuditError

    config_file = write_config(
        tmp_path,
        participant=(
            f'[participant]\nid = "{ME}"\ncoordinator_url = "http://coordinator"\n'
            f'counting_url = "http://counting"\ntoken = "{TOKEN}"\n'
            'audit_log = "logs/audit.jsonl"\n'
        ),
    )
    config = ParticipantConfig.from_file(config_file)
    assert config.audit_path == tmp_path / "logs" / "audit.jsonl"
    config.audit_path.parent.mkdir()
    config.audit_path.write_text('{"seq": 1, "edited": true}\n', encoding="ascii")
    fake = FakeCoordinator([], threading.Event())
    with pytest.raises(AuditError, match="line 1"):
        run_agent(config, transport=fake.transport(), counting_transport=counting.transport)
    assert fake.bodies == []


def test_a_masked_cohort_the_counting_service_refuses_is_not_contributed_to(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    """The forced-dropout attack of issue 20 against a cheating coordinator: a masked sum
    over all four was announced (so released), then hospital-d is forced out and a sum over
    the other three is asked. The agent announces that cohort first, the counting service
    refuses it, and the agent sends nothing."""
    from fedclust.coordinator.secure_sum import field_encodings

    everyone = [ME, "hospital-b", "hospital-c", "hospital-d"]
    counting.put_roster("job-m", everyone)
    with httpx.Client(
        base_url="http://counting/api/v1", transport=counting.transport,
        headers={"Authorization": "Bearer token-b"},
    ) as b:
        earlier = {"job_id": "job-m", "cohort": everyone}
        assert b.post("/jobs/job-m/cohorts", json=earlier).status_code == 204
    statistic = msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0)
    survivors = [ME, "hospital-b", "hospital-c"]
    spec = msg.SecureInputTask(
        round=2, cohort=survivors, statistic=statistic,
        encoding=field_encodings(statistic, n_features=2, n_parties=3, max_rows=256,
                                 value_bound=8.0),
    )
    declare = msg.DeclareTask(terms=terms(participants=everyone, protection="masking"))
    tasks = [task(0, declare, job="job-m"), task(1, spec, job="job-m")]
    reply = run(write_config(tmp_path), tasks, counting).replies()[-1]
    assert isinstance(reply, msg.RefusalReply)
    assert "the counting service refused this masked sum's cohort: HTTP 409" in reply.reason
    assert "(hospital-d)" in reply.reason


def test_an_unmasking_under_a_view_other_than_the_rounds_first_is_refused(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    """The split-view attack of the security review, at the agent: another member registered
    its view of round 1 first (everyone survived); this agent is told hospital-d dropped
    out, which would have it hand over its pair key with hospital-d while the others hand
    over the shares of its self-mask. It registers its view before answering, the counting
    service refuses it (one view per round), and the agent answers nothing but the refusal;
    the round's registered view stays the first one."""
    everyone = [ME, "hospital-b", "hospital-c", "hospital-d"]
    counting.put_roster("job-m", everyone)
    first = {"job_id": "job-m", "setup": 1, "round": 1, "survivors": everyone, "dropped": []}
    with httpx.Client(
        base_url="http://counting/api/v1", transport=counting.transport,
        headers={"Authorization": "Bearer token-b"},
    ) as b:
        assert b.post("/jobs/job-m/unmasking", json=first).status_code == 204
    split = msg.SecureUnmaskTask(
        round=1, survivors=everyone[:3], dropped=["hospital-d"], shares=[]
    )
    declare = msg.DeclareTask(terms=terms(participants=everyone, protection="masking"))
    fake = run(write_config(tmp_path), [task(0, declare, job="job-m"), task(1, split, job="job-m")],
               counting)
    reply = fake.replies()[-1]
    assert isinstance(reply, msg.RefusalReply)
    assert "the counting service refused this masked sum's unmasking" in reply.reason
    assert "HTTP 409" in reply.reason and "one view only" in reply.reason
    assert [c.reply.kind for c in fake.contributions] == ["declaration", "refusal"]
    with httpx.Client(
        base_url="http://counting/api/v1", transport=counting.transport,
        headers={"Authorization": "Bearer token-c"},
    ) as c:  # the first view is still the round's view
        assert c.post("/jobs/job-m/unmasking", json=first).status_code == 204


def test_a_count_over_a_roster_other_than_the_declared_one_is_refused(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    """Members the coordinator invents (issue 20), through the agent: the declare task names
    [hospital-a, hospital-b, hospital-c], which the roster rule admitted, while the
    coordinator put [hospital-a, hospital-c, hospital-d] at the counting service. The count
    report carries the admitted roster, the service refuses it (403), and the agent refuses
    the task with that reason; the service holds no count."""
    counting.put_roster("job-x", [ME, "hospital-c", "hospital-d"])
    tasks = declared([task(0, msg.ReportCountTask(), job="job-x")])
    reply = run(write_config(tmp_path), tasks, counting).replies()[-1]
    assert isinstance(reply, msg.RefusalReply)
    assert "the counting service refused the count of participant 'hospital-a': HTTP 403" in (
        reply.reason
    )
    assert "is not within the roster participant 'hospital-a' admitted" in reply.reason
    assert counting.reported("job-x") == (0, 0)


def test_a_count_reported_before_is_held_and_acknowledged(
    tmp_path: Path, X: NDArray[np.float64], counting: Counting
) -> None:
    """A report_count answered again (an agent restarted after sending it): the service's
    409 "already reported" means it holds the count, so the agent acknowledges; only a
    refusal on other grounds (the roster, above) becomes a refusal."""
    tasks = declared([task(0, msg.ReportCountTask()), task(1, msg.ReportCountTask())])
    replies = run(write_config(tmp_path), tasks, counting).replies()
    assert [r.kind for r in replies] == ["declaration", "ack", "ack"]
    assert counting.reported(JOB) == (1, N_L)
