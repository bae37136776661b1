"""A participant's side of the secure sums of one job (SecAgg+ masking, ``crypto.masking``).

:class:`SecureSession` answers the stages (``protocol.wire.messages.Secure*Task``):
``secure_setup`` (the roster and the peers' pinned keys checked, :class:`PeerPins`; keys made),
``secure_graph`` (peers' signed keys verified, the graph derived, neighbour keys agreed, its
digest answered), ``secure_input`` (a newer round and the cohort checked; the statistic
computed as the plain task would, encoded under its declared bound and words, masked; a value
over its bound is a fatal refusal, ``dispatch.over_bound_refusal``) and ``secure_unmask`` (the
asked seed shares or round keys, never both for one peer). With a ``keys_dir`` the keys and
every answer are saved (mode 0600) before the answer leaves, so a restarted agent answers
alike. A failed check is a refusal, and nothing is answered after it.

Design notes: ``docs/secure-sums.md`` (§ A participant's side).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.crypto.fixedpoint import BoundError, Statistic, encode
from fedclust.crypto.masking import (
    IdentityKey,
    IntegrityError,
    JobConfig,
    MaskingClient,
    UnmaskRequest,
)
from fedclust.infra.private_files import private_file, write_private
from fedclust.participant import dispatch
from fedclust.participant.dispatch import StageHandler
from fedclust.participant.local import LocalParticipant
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.secure import (
    b64,
    encrypted_share,
    raw,
    sealed_share,
    setup_job_id,
    signed_keys,
    to_key_advert,
)

__all__ = ["PeerPins", "SecureMember", "SecureSession", "load_identity"]


class PeerPins:
    """Peers' Ed25519 identity keys as first seen; a change is refused (trust on first use).

    Shared by all of an agent's jobs, so a coordinator cannot present another key for a
    peer it presented before. With ``path`` the pins persist (JSON, peer -> base64 key),
    written atomically whenever a peer is pinned. ``configured`` keys (the config's
    ``[peers]``, base64) are pinned from the start and take precedence over stored pins, so
    even the first introduction of those peers cannot be substituted.
    """

    def __init__(
        self, path: Path | None = None, configured: Mapping[str, str] | None = None
    ) -> None:
        self._path = path
        self._keys: dict[str, bytes] = {}
        if path is not None and path.exists():
            try:
                stored = json.loads(path.read_text(encoding="utf-8"))
                self._keys = {str(k): raw(str(v), f"pin of {k!r}") for k, v in stored.items()}
            except (ValueError, AttributeError, RefusedError) as exc:
                raise ValueError(f"{path}: not a file of pinned peer keys ({exc})") from None
        for peer, key in (configured or {}).items():
            self._keys[peer] = raw(key, f"configured key of {peer!r}")
        self._lock = threading.Lock()

    def check(self, peer: str, key: bytes) -> None:
        """Pin ``key`` for ``peer`` on first sight; refuse one that differs from the pin."""
        with self._lock:
            known = self._keys.get(peer)
            if known is None:
                self._keys[peer] = known = key
                self._save()
        if known != key:
            raise RefusedError(
                f"the identity key presented for peer {peer!r} differs from the one pinned "
                "for it: refused (a substituted key?)."
            )

    def _save(self) -> None:
        if self._path is None:
            return
        write_private(self._path, json.dumps({k: b64(v) for k, v in sorted(self._keys.items())}))


def load_identity(path: Path) -> IdentityKey:
    """The organisation's identity key from ``path`` (base64), created there (mode 0600) if
    the file does not exist."""
    if path.exists():
        try:
            return IdentityKey.from_private_bytes(raw(path.read_text().strip(), str(path)))
        except (RefusedError, ValueError) as exc:
            raise ValueError(f"{path}: not an Ed25519 identity key file ({exc})") from None
    key = IdentityKey.generate()
    with private_file(path, exclusive=True) as file:  # never replaces a key
        file.write((b64(key.private_bytes()) + "\n").encode("ascii"))
    return key


_ANSWERS = "answers.json"
_SPECS: TypeAdapter[msg.TaskSpec] = TypeAdapter(msg.TaskSpec)
_REPLIES: TypeAdapter[msg.Reply] = TypeAdapter(msg.Reply)


def _write_private(file: Path, document: Any) -> None:
    """Write JSON atomically, readable by the owner only (0600, folders 0700)."""
    write_private(file, json.dumps(document))


class SecureSession:
    """One participant's secure sums within one job; feed it the Secure*Task specs.

    Args:
        local: the participant's rows and policy (computes the statistics).
        participant_id: this participant's id in the federation.
        job_id: the job; every key and message is bound to it.
        identity: this organisation's Ed25519 identity key (its public half is registered).
        pins: the peers' identity keys pinned so far (shared across jobs).
        min_cohort: the smallest cohort this participant takes part in (at least 3).
        last_round: the latest round begun before (the agent's saved state): no older or
            equal round is begun again, across restarts too.
        keys_dir: where each key setup's keys are saved and, at construction, read back
            (module docstring); None keeps them in memory only.
    """

    def __init__(
        self,
        local: LocalParticipant,
        *,
        participant_id: str,
        job_id: str,
        identity: IdentityKey,
        pins: PeerPins,
        min_cohort: int = 3,
        last_round: int = 0,
        keys_dir: Path | None = None,
    ) -> None:
        if min_cohort < 3:
            raise ValueError("min_cohort must be at least 3.")
        self._local = local
        self._id = participant_id
        self._job = job_id
        self._identity = identity
        self._pins = pins
        self._min_cohort = min_cohort
        self._last_round = last_round
        self._clients: dict[int, MaskingClient] = {}  # per key setup of the job
        self._setups: dict[int, msg.SecureSetupTask] = {}
        self._answered: dict[str, tuple[msg.TaskSpec, msg.Reply]] = {}  # latest per stage
        self._lock = threading.Lock()
        self._keys_dir = keys_dir
        if keys_dir is not None:
            for file in sorted(keys_dir.glob("setup-*.json")):
                self._load_keys(file)
            self._load_answers(keys_dir / _ANSWERS)

    def _load_keys(self, file: Path) -> None:
        try:
            saved = json.loads(file.read_text(encoding="utf-8"))
            setup = int(saved["setup"])
            identities = {p: raw(k, f"identity of {p!r}") for p, k in saved["identities"].items()}
            config = JobConfig(
                setup_job_id(self._job, setup), tuple(saved["roster"]), saved["degree"],
                saved["threshold"], self._min_cohort,
            )
            self._clients[setup] = MaskingClient.restore(
                config, self._id, self._identity, identities, saved["keys"]
            )
        except (OSError, KeyError, TypeError, ValueError, RefusedError) as exc:
            raise ValueError(f"{file}: not a file of saved masking keys ({exc})") from None

    def _save_keys(self, setup: int, spec: msg.SecureSetupTask, client: MaskingClient) -> None:
        if self._keys_dir is None:
            return
        _write_private(self._keys_dir / f"setup-{setup}.json", {
            "setup": setup, "roster": spec.roster, "degree": spec.degree,
            "threshold": spec.threshold, "identities": spec.identities,
            "keys": client.export_keys(),
        })

    def _load_answers(self, file: Path) -> None:
        """The stages answered and rounds in progress before a restart (:meth:`_save_answers`)."""
        try:
            saved = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise ValueError(f"{file}: not a file of saved secure-sum answers ({exc})") from None
        try:
            for kind, pair in saved["answered"].items():
                self._answered[str(kind)] = (
                    _SPECS.validate_python(pair["spec"]), _REPLIES.validate_python(pair["reply"])
                )
            for setup, round_doc in saved["rounds"].items():
                client = self._clients.get(int(setup))
                if client is not None:
                    client.restore_round(round_doc)
            self._last_round = max(self._last_round, int(saved["last_round"]))
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise ValueError(f"{file}: not a file of saved secure-sum answers ({exc})") from None

    def _save_answers(self) -> None:
        """Save, before an answer leaves, what a restarted agent needs to give the same
        answer again and to unmask the round in progress (its own seed share: secret, 0600).

        Answering a re-asked stage afresh would send a second masked input of one round, with
        another self-mask: the one thing a participant must never do.
        """
        if self._keys_dir is None:
            return
        rounds = {
            str(setup): exported for setup, client in self._clients.items()
            if client.graph is not None and (exported := client.export_round()) is not None
        }
        _write_private(self._keys_dir / _ANSWERS, {
            "last_round": self._last_round,
            "answered": {
                kind: {"spec": spec.model_dump(mode="json"),
                       "reply": reply.model_dump(mode="json")}
                for kind, (spec, reply) in self._answered.items()
            },
            "rounds": rounds,
        })

    @property
    def job_id(self) -> str:
        return self._job

    def handle(self, spec: msg.TaskSpec) -> msg.Reply:
        """The answer to one stage task, or a refusal saying why.

        The same task asked again (a coordinator that lost an answer before storing it and
        resumed) gets the same answer, which tells it nothing new; any other task of a stage
        already answered is refused by the stage's own checks.
        """
        with self._lock:
            previous = self._answered.get(spec.kind)
            if previous is not None and previous[0] == spec:
                return previous[1]
            reply = self._answer(spec)
            if not isinstance(reply, msg.RefusalReply):
                self._answered[spec.kind] = (spec, reply)
                self._save_answers()
            return reply

    def _answer(self, spec: msg.TaskSpec) -> msg.Reply:
        try:
            return self._handle(spec)
        except RefusedError as exc:
            return msg.RefusalReply(reason=str(exc))
        except BoundError as exc:
            return dispatch.over_bound_refusal(exc, participant=self._id, job=self._job)
        except IntegrityError:
            return msg.RefusalReply(
                reason="a signature, a sealed share or a rebuilt key failed its integrity "
                "check: refused."
            )
        except (ProtocolError, ValueError) as exc:
            return msg.RefusalReply(reason=f"secure sum refused: {exc}")

    def _handle(self, spec: msg.TaskSpec) -> msg.Reply:
        match spec:
            case msg.SecureSetupTask():
                return self._setup(spec)
            case msg.SecureGraphTask(setup=setup, adverts=adverts):
                client = self._ready(setup, graph=False)
                graph = client.receive_adverts(
                    [to_key_advert(a, job_id=setup_job_id(self._job, setup)) for a in adverts]
                )
                self._save_keys(setup, self._setups[setup], client)
                return msg.GraphReply(graph_sha256=graph.digest)
            case msg.SecureInputTask():
                return self._masked_input(spec)
            case msg.SecureUnmaskTask(setup=setup, round=r, survivors=survivors, dropped=dropped):
                job = setup_job_id(self._job, setup)
                response = self._ready(setup).unmask(
                    UnmaskRequest(job, r, frozenset(survivors), frozenset(dropped)),
                    [encrypted_share(s, job_id=job, round_no=r) for s in spec.shares],
                )
                return msg.UnmaskSharesReply(
                    self_mask_shares={p: b64(v) for p, v in response.self_mask_shares.items()},
                    pair_keys={p: b64(v) for p, v in response.pair_keys.items()},
                )
        raise RefusedError(f"{spec.kind!r} is not a stage of a secure sum.")

    def _setup(self, spec: msg.SecureSetupTask) -> msg.Reply:
        if spec.setup in self._clients:
            raise RefusedError(
                f"key setup {spec.setup} of job {self._job!r} was made already: refused."
            )
        if self._id not in spec.roster:
            raise RefusedError("this participant is not in the secure sums' roster: refused.")
        missing = [p for p in spec.roster if p not in spec.identities]
        if missing:
            raise RefusedError(f"the roster's identity keys lack {missing}: refused.")
        identities = {p: raw(spec.identities[p], f"identity of {p!r}") for p in spec.roster}
        if identities[self._id] != self._identity.public_bytes():
            raise RefusedError(
                "the identity key the coordinator holds for this participant is not ours: "
                "refused."
            )
        for peer, key in identities.items():
            self._pins.check(peer, key)
        try:
            config = JobConfig(
                setup_job_id(self._job, spec.setup), tuple(spec.roster), spec.degree,
                spec.threshold, self._min_cohort,
            )
        except ValueError as exc:
            raise RefusedError(f"invalid secure-sum setup: {exc}") from None
        client = MaskingClient(config, self._id, self._identity, identities)
        self._clients[spec.setup] = client
        self._setups[spec.setup] = spec
        return msg.KeyAdvertReply(advert=signed_keys(client.advertise()))

    def _ready(self, setup: int, *, graph: bool = True) -> MaskingClient:
        client = self._clients.get(setup)
        if client is None or (graph and client.graph is None):
            raise RefusedError(
                f"this participant holds no keys of setup {setup} for the secure sums of job "
                f"{self._job!r} (made before it restarted, or never): refused."
            )
        return client

    def _masked_input(self, spec: msg.SecureInputTask) -> msg.Reply:
        client = self._ready(spec.setup)
        if spec.round <= self._last_round:
            raise RefusedError(
                f"secure sum round {spec.round} of job {self._job!r} is not newer than round "
                f"{self._last_round}, already begun: refused as a replay."
            )
        fields = dispatch.encoded_fields(self._local, spec.statistic, spec.encoding)
        values = {
            name: encode(Statistic(name, e.scale_bits, e.bound, e.words), value)
            for name, (value, e) in fields.items()
        }
        masked = client.masked_input(
            spec.round, spec.cohort, values, {name: e.words for name, (_, e) in fields.items()}
        )
        self._last_round = spec.round
        return msg.MaskedInputReply(
            vectors={name: msg.WireArray.of(v) for name, v in masked.vectors.items()},
            shares=[sealed_share(s) for s in masked.shares],
            seed_commitment=b64(masked.seed_commitment),
        )


class SecureMember:
    """A :class:`LocalParticipant` that also answers secure-sum stages, in process.

    The simulator's participant: every computation is the local participant's, and
    :meth:`answer` runs the same :func:`participant.dispatch.execute` path (policy
    check, then the stage handler: :class:`SecureSession` and/or
    ``participant.paillier_input.PaillierSession``) as the network agent.
    """

    def __init__(
        self, local: LocalParticipant, session: StageHandler, *, algorithm: msg.AnyAlgorithm,
        job_id: str,
    ) -> None:
        self.local = local
        self.name = local.name
        self._session = session
        self._algorithm = algorithm
        self._job = job_id
        self._tasks = 0

    @property
    def n_features(self) -> int:
        return self.local.n_features

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.local, attribute)

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The session's answer to one stage; a refusal raises RefusedError, a fatal one
        ProtocolError (the job cannot go on)."""
        self._tasks += 1
        task = msg.Task(
            job_id=self._job, task_id=self._tasks, algorithm=self._algorithm, spec=spec
        )
        reply = dispatch.execute(self.local, task, self._session)
        if isinstance(reply, msg.RefusalReply):
            raise reply.error(self.name)
        return reply
