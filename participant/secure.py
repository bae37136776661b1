"""A participant's side of the secure sums of one job (pairwise masking, ``crypto.masking``).

The coordinator runs each secure sum in four stages, each a task to every cohort member
(``protocol.messages.Secure*Task``); :class:`SecureSession` answers them:

0. ``secure_advertise``: check the cohort (this participant in it, at least ``min_cohort``
   members, the round number never seen before in this job) and the peers' identity keys
   against the ones pinned earlier (:class:`PeerPins`), then make fresh round keys;
1. ``secure_share_keys``: verify every peer's signed keys, answer sealed Shamir shares;
2. ``secure_input``: compute the asked statistic on the local rows (the same computation as
   the plain task), encode each summed field in Z_2^64 under its declared bound and answer it
   masked; a value over its bound (this participant's declared bounds are wrong) is a fatal
   refusal saying nothing of the data (``dispatch.over_bound_refusal``);
3. ``secure_unmask``: answer the shares the request asks for (``MaskingClient.unmask``
   refuses both kinds for one peer, and any contradiction of an earlier answer).

Keys are fresh for every secure sum, so a participant whose mask key was rebuilt after it
dropped out never masks anything else under that key. Any failed check is a refusal whose
reason the coordinator shows; nothing is answered after a failed check.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crypto.fixedpoint import BoundError, Statistic, encode
from crypto.masking import (
    EncryptedShare,
    IdentityKey,
    IntegrityError,
    MaskingClient,
    RoundConfig,
    UnmaskRequest,
)
from participant import dispatch
from participant.dispatch import StageHandler
from participant.local import LocalParticipant
from protocol import messages as msg
from protocol.errors import ProtocolError, RefusedError
from protocol.secure_wire import b64, raw, signed_keys, to_key_advert

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
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_name(self._path.name + ".tmp")
        tmp.write_text(json.dumps({k: b64(v) for k, v in sorted(self._keys.items())}))
        os.replace(tmp, self._path)


def load_identity(path: Path) -> IdentityKey:
    """The organisation's identity key from ``path`` (base64), created there (mode 0600) if
    the file does not exist."""
    if path.exists():
        try:
            return IdentityKey.from_private_bytes(raw(path.read_text().strip(), str(path)))
        except (RefusedError, ValueError) as exc:
            raise ValueError(f"{path}: not an Ed25519 identity key file ({exc})") from None
    key = IdentityKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(b64(key.private_bytes()) + "\n")
    return key


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
        self._client: MaskingClient | None = None
        self._lock = threading.Lock()

    @property
    def job_id(self) -> str:
        return self._job

    def handle(self, spec: msg.TaskSpec) -> msg.Reply:
        """The answer to one stage task, or a refusal saying why."""
        with self._lock:
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
            case msg.SecureAdvertiseTask():
                return self._advertise(spec)
            case msg.SecureShareKeysTask(round=r, adverts=adverts):
                client = self._current(r)
                bound = [to_key_advert(a, job_id=self._job, round_no=r) for a in adverts]
                shares = client.share_keys(bound)
                return msg.SealedSharesReply(
                    shares=[
                        msg.SealedShare(
                            sender=s.sender, recipient=s.recipient, ciphertext=b64(s.ciphertext)
                        )
                        for s in shares
                    ]
                )
            case msg.SecureInputTask():
                return self._masked_input(spec)
            case msg.SecureUnmaskTask(round=r, survivors=survivors, dropped=dropped):
                response = self._current(r).unmask(
                    UnmaskRequest(self._job, r, frozenset(survivors), frozenset(dropped))
                )
                return msg.UnmaskSharesReply(
                    self_mask_shares={
                        p: b64(s.to_bytes()) for p, s in response.self_mask_shares.items()
                    },
                    mask_key_shares={
                        p: b64(s.to_bytes()) for p, s in response.mask_key_shares.items()
                    },
                )
        raise RefusedError(f"{spec.kind!r} is not a stage of a secure sum.")

    def _advertise(self, spec: msg.SecureAdvertiseTask) -> msg.Reply:
        if spec.round <= self._last_round:
            raise RefusedError(
                f"secure sum round {spec.round} of job {self._job!r} is not newer than round "
                f"{self._last_round}, already begun: refused as a replay."
            )
        if self._id not in spec.cohort:
            raise RefusedError("this participant is not in the secure sum's cohort: refused.")
        missing = [p for p in spec.cohort if p not in spec.identities]
        if missing:
            raise RefusedError(f"the cohort's identity keys lack {missing}: refused.")
        identities = {p: raw(spec.identities[p], f"identity of {p!r}") for p in spec.cohort}
        if identities[self._id] != self._identity.public_bytes():
            raise RefusedError(
                "the identity key the coordinator holds for this participant is not ours: "
                "refused."
            )
        for peer, key in identities.items():
            self._pins.check(peer, key)
        try:
            config = RoundConfig(
                self._job, spec.round, tuple(spec.cohort), spec.threshold, self._min_cohort
            )
        except ValueError as exc:
            raise RefusedError(f"invalid secure sum round: {exc}") from None
        self._last_round = spec.round
        self._client = MaskingClient(config, self._id, self._identity, identities)
        return msg.KeyAdvertReply(advert=signed_keys(self._client.advertise()))

    def _current(self, round_no: int) -> MaskingClient:
        if self._client is None or round_no != self._last_round:
            raise RefusedError(
                f"secure sum round {round_no} is not the round in progress "
                f"({self._last_round}): refused."
            )
        return self._client

    def _masked_input(self, spec: msg.SecureInputTask) -> msg.Reply:
        client = self._current(spec.round)
        fields = dispatch.encoded_fields(self._local, spec.statistic, spec.encoding)
        values = {
            name: encode(Statistic(name, e.scale_bits, e.bound), value)
            for name, (value, e) in fields.items()
        }
        shares = [
            EncryptedShare(
                self._job, spec.round, s.sender, s.recipient, raw(s.ciphertext, "ciphertext")
            )
            for s in spec.shares
        ]
        masked = client.masked_input(values, shares)
        return msg.MaskedInputReply(
            vectors={name: msg.WireArray.of(v) for name, v in masked.vectors.items()}
        )


class SecureMember:
    """A :class:`LocalParticipant` that also answers secure-sum stages, in process.

    The simulator's participant: every computation is the local participant's, and
    :meth:`secure_stage` runs the same :func:`participant.dispatch.execute` path (policy
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

    def secure_stage(self, spec: msg.TaskSpec) -> msg.Reply:
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
