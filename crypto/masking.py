"""Pairwise masking on a neighbour graph: SecAgg+ (Bell et al., CCS 2020) over the semi-honest
masking of Bonawitz et al. (CCS 2017, §4 and Fig. 4). Pure and in-process.

Once per job: ``MaskingClient.advertise`` (a :class:`KeyAdvert`: X25519 keys c_u, s_u and a
nonce, signed with the Ed25519 identity key), then ``receive_adverts`` (verify every advert,
derive the graph of :mod:`crypto.graph`, agree c_uv and s_uv with the k neighbours).
Per secure sum (round r, cohort C_r), two stages: ``masked_input`` answers
y_u = x_u + PRG(b_u^r) + Σ_{v∈N(u)∩C_r} ±PRG(HKDF(s_uv; job, r)) in Z_2^(64·w) (+ when u < v),
with Shamir shares (threshold t) of b_u^r sealed to the neighbours; ``unmask`` gives, per
neighbour, its share of b_v^r (a survivor) or the round key HKDF(s_ud; job, r) (a dropout),
never both. The server's sum is then the exact sum of the survivors' inputs.

Raises :class:`RefusedError` for a cohort below ``min_cohort`` (3), a disconnected cohort or
survivor graph, fewer than t share holders, a replayed or older round, or an unmask request
that is not a split of the cohort or contradicts an earlier one.

Design notes: ``docs/secure-sums.md`` (§ Masking).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, NoReturn

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from numpy.typing import NDArray

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.core.validation import check_int
from fedclust.crypto import _prg, shamir
from fedclust.crypto._prg import IntegrityError
from fedclust.crypto.fixedpoint import add_into, subtract_into
from fedclust.crypto.graph import MaskingGraph, shared_graph

__all__ = [
    "EncryptedShare",
    "IdentityKey",
    "IntegrityError",
    "JobConfig",
    "KeyAdvert",
    "MaskedInput",
    "MaskingClient",
    "MaskingServer",
    "ServerRound",
    "UnmaskRequest",
    "UnmaskResponse",
    "audit_signature_valid",
]

DEFAULT_MIN_COHORT = 3
SEED_BYTES = 32
NONCE_BYTES = 32
UInt64Array = NDArray[np.uint64]


@dataclass(frozen=True)
class JobConfig:
    """What every party knows before the key setup: job, roster, graph degree k (None: the
    complete graph), Shamir threshold t and minimum cohort. Shamir x coordinates are the
    1-based positions of the ids in sorted order."""

    job_id: str
    participants: tuple[str, ...]
    degree: int | None
    threshold: int
    min_cohort: int = DEFAULT_MIN_COHORT

    def __post_init__(self) -> None:
        if not isinstance(self.job_id, str) or not self.job_id:
            raise ValueError("job_id must be a non-empty string.")
        ids = self.participants
        if (
            not isinstance(ids, tuple)
            or not all(isinstance(p, str) and p for p in ids)
            or len(set(ids)) != len(ids)
        ):
            raise ValueError("participants must be a tuple of distinct non-empty string ids.")
        check_int(self.min_cohort, name="min_cohort", owner="JobConfig", low=3)
        n = len(ids)
        if n < self.min_cohort:
            raise RefusedError(
                f"A secure sum needs at least min_cohort={self.min_cohort} participants; "
                f"got {n}."
            )
        if self.degree is not None:
            check_int(self.degree, name="degree", owner="JobConfig", low=2, high=n - 1)
            if self.degree % 2:
                raise ValueError("degree must be even (each node links k/2 ring neighbours "
                                 "on either side).")
        check_int(self.threshold, name="threshold", owner="JobConfig", low=2,
                  high=(self.degree or n - 1) + 1)
        object.__setattr__(self, "participants", tuple(sorted(ids)))

    def x_of(self, participant: str) -> int:
        return self._positions[participant]

    def is_member(self, participant: str) -> bool:
        return participant in self._positions

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {p: i + 1 for i, p in enumerate(self.participants)}

    @cached_property
    def roster_digest(self) -> bytes:
        return hashlib.sha256(_prg.label(*self.participants)).digest()


class IdentityKey:
    """An organisation's long-term Ed25519 signing key (its public half is registered)."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key

    @classmethod
    def generate(cls) -> IdentityKey:
        return cls(_prg.ed25519_generate())

    @classmethod
    def from_private_bytes(cls, raw: bytes) -> IdentityKey:
        return cls(_prg.ed25519_from_bytes(raw))

    def private_bytes(self) -> bytes:
        return _prg.ed25519_private_bytes(self._key)

    def public_bytes(self) -> bytes:
        return _prg.ed25519_public_bytes(self._key)

    def _sign(self, message: bytes) -> bytes:
        return _prg.sign(self._key, message)

    def sign_audit(self, *context: str | int) -> bytes:
        """Signature of an audit-log statement (``"line", hash`` or ``"head", seq, sha256``),
        in a context no advert can share."""
        return self._sign(_prg.label(_prg.AUDIT_PREFIX, *context))

    def __repr__(self) -> str:
        return f"IdentityKey(public={self.public_bytes().hex()[:16]}…, private=<hidden>)"

    def __reduce__(self) -> NoReturn:
        raise TypeError("IdentityKey is not picklable; store private_bytes() in a key file.")


# -- messages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyAdvert:
    """Stage 0: a participant's job keys and nonce, signed by its identity over the job, the
    roster and the graph parameters."""

    job_id: str
    sender: str
    enc_public: bytes
    mask_public: bytes
    nonce: bytes
    signature: bytes

    def signed_bytes(self, config: JobConfig) -> bytes:
        return _advert_message(
            self.job_id, config.roster_digest, config.degree or 0, config.threshold,
            self.sender, self.enc_public, self.mask_public, self.nonce,
        )


def audit_signature_valid(public: bytes, signature: bytes, *context: str | int) -> bool:
    """Whether ``signature`` is ``public``'s :meth:`IdentityKey.sign_audit` of ``context``."""
    try:
        _prg.verify(public, signature, _prg.label(_prg.AUDIT_PREFIX, *context))
    except IntegrityError:
        return False
    return True


@functools.lru_cache(maxsize=1 << 16)
def _advert_message(*parts: str | int | bytes) -> bytes:
    """The signed bytes of an advert (remembered: a simulator's participants all check the
    same adverts)."""
    return _prg.label(_prg.ADVERT_PREFIX, *parts)


@dataclass(frozen=True)
class EncryptedShare:
    """Stage 2: the sender's share of its round seed for one recipient, AES-GCM sealed."""

    job_id: str
    round: int
    sender: str
    recipient: str
    ciphertext: bytes = field(repr=False)

    def associated_data(self) -> bytes:
        return _prg.label(_prg.SHARE_PREFIX, self.job_id, self.round, self.sender, self.recipient)


@dataclass(frozen=True, eq=False)
class MaskedInput:
    """Stage 2: masked vectors (one uint64 array per statistic), the sealed seed shares for
    the neighbours, and the commitment to the round's self-mask seed."""

    job_id: str
    round: int
    sender: str
    vectors: Mapping[str, UInt64Array] = field(repr=False)
    shares: tuple[EncryptedShare, ...] = field(repr=False)
    seed_commitment: bytes = field(repr=False)


@dataclass(frozen=True)
class UnmaskRequest:
    """Stage 3 request: whose masked input arrived (survivors) and who dropped."""

    job_id: str
    round: int
    survivors: frozenset[str]
    dropped: frozenset[str]


@dataclass(frozen=True, eq=False, repr=False)
class UnmaskResponse:
    """Stage 3 answer: shares (:func:`crypto.shamir.share_bytes`) of survivors' round seeds,
    and the round's pair-mask key with each dropped neighbour."""

    job_id: str
    round: int
    sender: str
    self_mask_shares: Mapping[str, bytes]
    pair_keys: Mapping[str, bytes]

    def __repr__(self) -> str:
        return (
            f"UnmaskResponse(job_id={self.job_id!r}, round={self.round}, sender={self.sender!r}, "
            f"self_mask_shares for {sorted(self.self_mask_shares)}, "
            f"pair_keys for {sorted(self.pair_keys)})"
        )


def _graph(config: JobConfig, adverts: Mapping[str, KeyAdvert]) -> MaskingGraph:
    return MaskingGraph.derive(
        config.job_id, {p: a.nonce for p, a in adverts.items()}, degree=config.degree
    )


def _verify_adverts(
    config: JobConfig, identities: Mapping[str, bytes], adverts: Sequence[KeyAdvert]
) -> dict[str, KeyAdvert]:
    by_sender: dict[str, KeyAdvert] = {}
    for advert in adverts:
        if advert.job_id != config.job_id:
            raise RefusedError(
                f"a key advert of job {advert.job_id!r} was offered in job {config.job_id!r}: "
                "refused as a replay."
            )
        if not config.is_member(advert.sender) or advert.sender in by_sender:
            raise ProtocolError("Key adverts must come from distinct members of the roster.")
        if len(advert.nonce) != NONCE_BYTES:
            raise IntegrityError("integrity check failed")
        _prg.verify(identities[advert.sender], advert.signature, advert.signed_bytes(config))
        by_sender[advert.sender] = advert
    if len(by_sender) < config.min_cohort:
        raise RefusedError(
            f"{len(by_sender)} participants advertised keys, fewer than "
            f"min_cohort={config.min_cohort}: refused."
        )
    return by_sender


def _check_identities(config: JobConfig, identities: Mapping[str, bytes]) -> dict[str, bytes]:
    missing = [p for p in config.participants if p not in identities]
    if missing:
        raise ValueError(f"identities lacks the identity keys of {len(missing)} participant(s).")
    return {p: bytes(identities[p]) for p in config.participants}


def _unflatten(
    flat: UInt64Array, shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, UInt64Array]:
    """Split a round's vector, laid end to end in name order, back into its statistics."""
    out: dict[str, UInt64Array] = {}
    start = 0
    for name in sorted(shapes):
        size = int(np.prod(shapes[name], dtype=np.int64))
        out[name] = flat[start : start + size].reshape(shapes[name])
        start += size
    return out


def _check_words(
    words: Mapping[str, int] | None, shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, int]:
    """Each statistic's ring width (1 unless given); a w-word one has a last axis of w limbs."""
    out = {name: 1 if words is None else int(words.get(name, 1)) for name in shapes}
    for name, w in out.items():
        if w < 1 or (w > 1 and (not shapes[name] or shapes[name][-1] != w)):
            raise ValueError(
                f"statistic {name!r} of {w} words must be a uint64 array whose last axis "
                f"holds its {w} limbs."
            )
    return out


class _Layout:
    """Where each statistic's words lie in a round's vector (name order) and its ring width:
    masks are added and removed in Z_2^(64·w) per statistic (``crypto.fixedpoint``)."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]], words: Mapping[str, int]) -> None:
        self.size = 0
        self.spans: list[tuple[int, int, int]] = []  # (start, stop, words) per statistic
        for name in sorted(shapes):
            stop = self.size + int(np.prod(shapes[name], dtype=np.int64))
            self.spans.append((self.size, stop, words[name]))
            self.size = stop
        self.one_word = all(w == 1 for _, _, w in self.spans)

    def add(self, flat: UInt64Array, mask: UInt64Array) -> None:
        if self.one_word:
            flat += mask
            return
        for start, stop, w in self.spans:
            add_into(flat[start:stop], mask[start:stop], w)

    def subtract(self, flat: UInt64Array, mask: UInt64Array) -> None:
        if self.one_word:
            flat -= mask
            return
        for start, stop, w in self.spans:
            subtract_into(flat[start:stop], mask[start:stop], w)


# -- participant ---------------------------------------------------------------------------------


@dataclass
class _Round:
    """A participant's state of one secure sum."""

    number: int
    cohort: frozenset[str]
    own_share: tuple[int, UInt64Array]
    answered: UnmaskRequest | None = None


class MaskingClient:
    """One participant's side of every secure sum of one job (job keys, per-round seeds)."""

    def __init__(
        self,
        config: JobConfig,
        participant_id: str,
        identity: IdentityKey,
        identities: Mapping[str, bytes],
    ) -> None:
        if not config.is_member(participant_id):
            raise ValueError("participant_id must be a member of config.participants.")
        self._config = config
        self._id = participant_id
        self._identity = identity
        self._identities = _check_identities(config, identities)
        if self._identities[participant_id] != identity.public_bytes():
            raise ValueError("identity does not match the registered key of participant_id.")
        self._enc_key: X25519PrivateKey = _prg.x25519_generate()
        self._mask_key: X25519PrivateKey = _prg.x25519_generate()
        self._nonce = secrets.token_bytes(NONCE_BYTES)
        self._advertised = False
        self._graph: MaskingGraph | None = None
        self._seal_keys: dict[str, bytes] = {}  # neighbour -> AEAD key for the job
        self._mask_secrets: dict[str, bytes] = {}  # neighbour -> X25519(s_u, s_v)
        self._last_round = 0
        self._round: _Round | None = None

    def __repr__(self) -> str:
        c = self._config
        return f"MaskingClient({self._id!r}, job={c.job_id!r}, round={self._last_round})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("MaskingClient holds secrets and is not picklable.")

    @property
    def graph(self) -> MaskingGraph | None:
        return self._graph

    def export_keys(self) -> dict[str, Any]:
        """The job keys after the setup, as JSON (hex): for the participant's own state
        folder, so a restarted agent masks the job's later sums with them. Secret."""
        graph = self._ready()
        return {
            "version": 1,
            "enc_key": _prg.x25519_private_bytes(self._enc_key).hex(),
            "mask_key": _prg.x25519_private_bytes(self._mask_key).hex(),
            "nonce": self._nonce.hex(),
            "graph": {"nodes": list(graph.nodes), "seed": graph.seed.hex(),
                      "degree": graph.degree},
            "seal_keys": {p: k.hex() for p, k in self._seal_keys.items()},
            "mask_secrets": {p: k.hex() for p, k in self._mask_secrets.items()},
            "last_round": self._last_round,
        }

    def export_round(self) -> dict[str, Any] | None:
        """The round in progress (number, cohort, this participant's own share of its seed,
        the unmask request answered), as JSON, or None: saved beside the keys so a restarted
        agent can still answer the round's unmasking. Secret."""
        r = self._round
        if r is None:
            return None
        x, row = r.own_share
        answered = None if r.answered is None else {
            "survivors": sorted(r.answered.survivors), "dropped": sorted(r.answered.dropped),
        }
        return {"number": r.number, "cohort": sorted(r.cohort), "x": x,
                "share": [int(v) for v in row], "answered": answered}

    def restore_round(self, saved: Mapping[str, Any]) -> None:
        """Take up the round of :meth:`export_round` (ValueError if it is damaged)."""
        try:
            number = int(saved["number"])
            answered = saved["answered"]
            self._round = _Round(
                number, frozenset(str(p) for p in saved["cohort"]),
                (int(saved["x"]), np.asarray(saved["share"], dtype=np.uint64)),
                None if answered is None else UnmaskRequest(
                    self._config.job_id, number, frozenset(answered["survivors"]),
                    frozenset(answered["dropped"]),
                ),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"a saved secure-sum round is damaged ({exc})") from None
        self._last_round = max(self._last_round, number)

    @classmethod
    def restore(
        cls,
        config: JobConfig,
        participant_id: str,
        identity: IdentityKey,
        identities: Mapping[str, bytes],
        keys: Mapping[str, Any],
    ) -> MaskingClient:
        """A client with the keys of :meth:`export_keys` (ValueError if they are damaged)."""
        client = cls(config, participant_id, identity, identities)
        try:
            if keys["version"] != 1:
                raise ValueError(f"version {keys['version']!r}")
            client._enc_key = _prg.x25519_from_bytes(bytes.fromhex(keys["enc_key"]))
            client._mask_key = _prg.x25519_from_bytes(bytes.fromhex(keys["mask_key"]))
            client._nonce = bytes.fromhex(keys["nonce"])
            g = keys["graph"]
            client._graph = shared_graph(tuple(g["nodes"]), bytes.fromhex(g["seed"]), g["degree"])
            client._seal_keys = {p: bytes.fromhex(k) for p, k in keys["seal_keys"].items()}
            client._mask_secrets = {p: bytes.fromhex(k) for p, k in keys["mask_secrets"].items()}
            client._last_round = int(keys["last_round"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"saved masking keys are damaged ({exc})") from None
        if participant_id not in client._graph.node_set or set(client._mask_secrets) != set(
            client._graph.neighbours(participant_id)
        ):
            raise ValueError("saved masking keys do not fit their graph.")
        client._advertised = True
        return client

    def advertise(self) -> KeyAdvert:
        """Stage 0: the signed public keys of this job (asked once)."""
        if self._advertised:
            raise ProtocolError("the job's keys were advertised already.")
        c = self._config
        unsigned = KeyAdvert(
            c.job_id, self._id,
            _prg.x25519_public_bytes(self._enc_key),
            _prg.x25519_public_bytes(self._mask_key),
            self._nonce, b"",
        )
        self._advertised = True
        return replace(unsigned, signature=self._identity._sign(unsigned.signed_bytes(c)))

    def receive_adverts(self, adverts: Sequence[KeyAdvert]) -> MaskingGraph:
        """Stage 1: verify the adverts, derive the graph, agree keys with the neighbours."""
        if not self._advertised or self._graph is not None:
            raise ProtocolError("receive_adverts comes once, after advertise.")
        c = self._config
        by_sender = _verify_adverts(c, self._identities, adverts)
        own = by_sender.get(self._id)
        if own is None or own.nonce != self._nonce or (
            own.mask_public != _prg.x25519_public_bytes(self._mask_key)
        ) or own.enc_public != _prg.x25519_public_bytes(self._enc_key):
            raise IntegrityError("integrity check failed")
        graph = _graph(c, by_sender)
        for peer in graph.neighbours(self._id):
            advert = by_sender[peer]
            enc = _prg.x25519_exchange(self._enc_key, advert.enc_public)
            self._seal_keys[peer] = _prg.share_encryption_key(
                enc, job_id=c.job_id, a=self._id, b=peer
            )
            self._mask_secrets[peer] = _prg.x25519_exchange(self._mask_key, advert.mask_public)
        self._graph = graph
        return graph

    def _ready(self) -> MaskingGraph:
        if self._graph is None:
            raise ProtocolError("no secure sum before the job's key setup.")
        return self._graph

    def masked_input(
        self,
        round_no: int,
        cohort: Sequence[str],
        values: Mapping[str, UInt64Array],
        words: Mapping[str, int] | None = None,
    ) -> MaskedInput:
        """Stage 2: the masked vectors of round ``round_no`` among ``cohort``.

        ``values`` maps statistic names to encoded uint64 arrays (:func:`crypto.fixedpoint.encode`);
        ``words`` their ring widths (1 where not given): a w-word statistic's masks are w
        keystream words per value, added with carries in Z_2^(64·w).
        """
        graph = self._ready()
        c = self._config
        check_int(round_no, name="round", owner="masked_input", low=1)
        if round_no <= self._last_round:
            raise RefusedError(
                f"secure sum round {round_no} of job {c.job_id!r} is not newer than round "
                f"{self._last_round}, already begun: refused as a replay."
            )
        if not values or not all(
            isinstance(k, str) and k and isinstance(v, np.ndarray) and v.dtype == np.uint64
            for k, v in values.items()
        ):
            raise ValueError(
                "values must map non-empty statistic names to uint64 arrays "
                "(see crypto.fixedpoint.encode)."
            )
        shapes = {k: v.shape for k, v in values.items()}
        layout = _Layout(shapes, _check_words(words, shapes))
        members = frozenset(cohort)
        self._check_cohort(graph, members, "the secure sum's cohort")
        holders = [p for p in graph.neighbours(self._id) if p in members]
        if len(holders) + 1 < c.threshold:
            raise RefusedError(
                f"only {len(holders)} of this participant's graph neighbours take part in the "
                f"secure sum; its seed needs threshold={c.threshold} share holders "
                "(itself included): refused."
            )
        self._last_round = round_no
        seed = secrets.token_bytes(SEED_BYTES)
        xs = [c.x_of(p) for p in holders] + [c.x_of(self._id)]
        shares = shamir.split(seed, threshold=c.threshold, xs=xs)
        sealed = []
        for peer, x, row in zip(holders, xs, shares, strict=False):
            associated = _prg.label(_prg.SHARE_PREFIX, c.job_id, round_no, self._id, peer)
            ciphertext = _prg.seal(self._seal_keys[peer], shamir.share_bytes(x, row), associated)
            sealed.append(EncryptedShare(c.job_id, round_no, self._id, peer, ciphertext))
        flat = np.concatenate([values[k].reshape(-1) for k in sorted(values)])
        stream = _prg.Keystream(flat.size)
        layout.add(
            flat,
            stream.words(
                _prg.self_mask_key(seed, job_id=c.job_id, round_no=round_no, owner=self._id)
            ),
        )
        for peer in holders:
            mask = stream.words(self._pair_key(peer, round_no))
            if self._id < peer:
                layout.add(flat, mask)
            else:
                layout.subtract(flat, mask)
        masked = _unflatten(flat, {k: v.shape for k, v in values.items()})
        self._round = _Round(round_no, members, (xs[-1], shares[-1]))
        commitment = _prg.seed_commitment(seed, job_id=c.job_id, round_no=round_no, owner=self._id)
        return MaskedInput(c.job_id, round_no, self._id, masked, tuple(sealed), commitment)

    def _pair_key(self, peer: str, round_no: int) -> bytes:
        return _prg.pair_mask_key(
            self._mask_secrets[peer], job_id=self._config.job_id, round_no=round_no,
            a=self._id, b=peer,
        )

    def _check_cohort(self, graph: MaskingGraph, members: frozenset[str], what: str) -> None:
        c = self._config
        if self._id not in members:
            raise RefusedError(f"this participant is not in {what}: refused.")
        strangers = members - graph.node_set
        if strangers:
            raise RefusedError(
                f"{what} names {len(strangers)} participant(s) outside the job's key setup: "
                "refused."
            )
        if len(members) < c.min_cohort:
            raise RefusedError(
                f"{what} has {len(members)} participants, fewer than "
                f"min_cohort={c.min_cohort}: refused."
            )
        if not graph.connected(members):
            raise RefusedError(
                f"{what} splits the masking graph into parts whose separate sums would be "
                "revealed: refused."
            )

    def unmask(
        self, request: UnmaskRequest, shares_for_me: Sequence[EncryptedShare]
    ) -> UnmaskResponse:
        """Stage 3: seed shares of the survivors and round keys shared with the dropouts.

        Refuses a request that is not a split of the round's cohort with this participant
        among the survivors, that differs from an earlier request of the round, or whose
        survivors disconnect the graph (or fall below the minimum cohort).
        """
        graph = self._ready()
        c = self._config
        current = self._round
        if current is None or request.round != current.number or request.job_id != c.job_id:
            raise RefusedError(
                f"unmask request for job {request.job_id!r} round {request.round} does not "
                f"match the round in progress ({self._last_round}): refused."
            )
        survivors, dropped = frozenset(request.survivors), frozenset(request.dropped)
        if survivors & dropped or survivors | dropped != current.cohort:
            raise RefusedError(
                "The unmask request must split the round's cohort into survivors and "
                "dropouts, naming nobody as both: refused."
            )
        if current.answered is not None and current.answered != request:
            raise RefusedError(
                "The unmask request contradicts an earlier one of this round (a participant "
                "reported received is now reported dropped, or the reverse): refused."
            )
        self._check_cohort(graph, survivors, "the unmask request's survivors")
        held: dict[str, bytes] = {self._id: shamir.share_bytes(*current.own_share)}
        neighbours = set(graph.neighbours(self._id))
        for message in shares_for_me:
            if (
                message.job_id != c.job_id
                or message.round != current.number
                or message.recipient != self._id
                or message.sender not in neighbours
                or message.sender not in survivors
                or message.sender in held
            ):
                raise ProtocolError(
                    "Sealed shares must be addressed to this participant for this round, one "
                    "per surviving neighbour."
                )
            plain = _prg.open_sealed(
                self._seal_keys[message.sender], message.ciphertext, message.associated_data()
            )
            try:
                x, _ = shamir.share_from_bytes(plain, SEED_BYTES)
            except ValueError:
                raise IntegrityError("integrity check failed") from None
            if x != c.x_of(self._id):
                raise IntegrityError("integrity check failed")
            held[message.sender] = plain
        current.answered = request
        return UnmaskResponse(
            c.job_id, current.number, self._id,
            self_mask_shares=held,
            pair_keys={d: self._pair_key(d, current.number) for d in sorted(dropped & neighbours)},
        )


# -- server --------------------------------------------------------------------------------------


class MaskingServer:
    """The coordinator's side of one job: verifies the adverts, holds the graph, runs rounds."""

    def __init__(self, config: JobConfig, identities: Mapping[str, bytes]) -> None:
        self._config = config
        self._identities = _check_identities(config, identities)
        self._adverts: dict[str, KeyAdvert] = {}
        self._graph: MaskingGraph | None = None
        self._last_round = 0

    def __repr__(self) -> str:
        c = self._config
        return f"MaskingServer(job={c.job_id!r}, round={self._last_round})"

    @property
    def graph(self) -> MaskingGraph:
        if self._graph is None:
            raise ProtocolError("the job's keys were not set up yet.")
        return self._graph

    def receive_adverts(self, adverts: Sequence[KeyAdvert]) -> list[KeyAdvert]:
        """Stage 0: verify the adverts and derive the graph; the list every member gets."""
        if self._graph is not None:
            raise ProtocolError("the job's keys were set up already.")
        by_sender = _verify_adverts(self._config, self._identities, adverts)
        self._adverts = by_sender
        self._graph = _graph(self._config, by_sender)
        return [by_sender[p] for p in sorted(by_sender)]

    def begin(
        self, round_no: int, cohort: Sequence[str], words: Mapping[str, int] | None = None
    ) -> ServerRound:
        """A new secure sum among ``cohort`` (round numbers increase); ``words``: the ring
        width of each statistic (1 where not given)."""
        graph = self.graph
        check_int(round_no, name="round", owner="MaskingServer.begin", low=self._last_round + 1)
        members = frozenset(cohort)
        if not members <= graph.node_set:
            raise ProtocolError("a secure sum's cohort must lie within the job's key setup.")
        self._last_round = round_no
        return ServerRound(self._config, graph, round_no, members, words)


class ServerRound:
    """One secure sum on the server: sums masked inputs, unmasks with the survivors' help."""

    def __init__(
        self,
        config: JobConfig,
        graph: MaskingGraph,
        round_no: int,
        cohort: frozenset[str],
        words: Mapping[str, int] | None = None,
    ) -> None:
        self._config = config
        self._graph = graph
        self._round = round_no
        self._cohort = cohort
        self._words = dict(words or {})
        self._inputs: dict[str, MaskedInput] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._layout: _Layout | None = None
        self._sums: dict[str, UInt64Array] = {}
        self._request: UnmaskRequest | None = None
        self._responses: dict[str, UnmaskResponse] = {}

    def receive_masked_input(self, message: MaskedInput) -> None:
        """Add one participant's masked vectors to the running sums (Z_2^(64·w))."""
        c = self._config
        if message.job_id != c.job_id or message.round != self._round:
            raise ProtocolError("A masked input of another job or round was offered.")
        if self._request is not None:
            raise ProtocolError("Masked inputs are closed: the unmasking has begun.")
        if message.sender not in self._cohort or message.sender in self._inputs:
            raise ProtocolError("Masked inputs come once from each member of the cohort.")
        if not all(v.dtype == np.uint64 for v in message.vectors.values()):
            raise ProtocolError("Masked vectors must be uint64 arrays.")
        shapes = {k: tuple(v.shape) for k, v in message.vectors.items()}
        if not self._shapes:
            try:
                words = _check_words(self._words, shapes)
            except ValueError as exc:
                raise ProtocolError(str(exc)) from None
            self._shapes = shapes
            self._layout = _Layout(shapes, words)
            self._words = words
            self._sums = {k: np.zeros(s, dtype=np.uint64) for k, s in shapes.items()}
        elif shapes != self._shapes:
            raise ProtocolError("Masked inputs must carry the same statistics and shapes.")
        neighbours = set(self._graph.neighbours(message.sender))
        if any(
            s.sender != message.sender or s.recipient not in neighbours
            or s.recipient not in self._cohort or s.round != self._round
            for s in message.shares
        ) or len({s.recipient for s in message.shares}) != len(message.shares):
            raise ProtocolError("Sealed seed shares must go to the sender's neighbours, once each.")
        for k, v in message.vectors.items():
            add_into(self._sums[k], v, self._words[k])
        self._inputs[message.sender] = message

    def unmask_request(self) -> tuple[UnmaskRequest, dict[str, list[EncryptedShare]]]:
        """Close input collection: the request, and each survivor's inbox of seed shares."""
        c = self._config
        survivors = frozenset(self._inputs)
        if len(survivors) < c.min_cohort:
            raise ProtocolError(
                f"The round cannot be unmasked: {len(survivors)} masked inputs arrived, fewer "
                f"than min_cohort={c.min_cohort}."
            )
        if not self._graph.connected(survivors):
            raise ProtocolError(
                "The round cannot be unmasked: the survivors' part of the masking graph is "
                "disconnected (too many dropouts for the graph's degree)."
            )
        self._request = UnmaskRequest(c.job_id, self._round, survivors, self._cohort - survivors)
        inboxes: dict[str, list[EncryptedShare]] = {p: [] for p in sorted(survivors)}
        for sender in sorted(survivors):
            for share in self._inputs[sender].shares:
                if share.recipient in survivors:
                    inboxes[share.recipient].append(share)
        return self._request, inboxes

    def receive_unmask_response(self, response: UnmaskResponse) -> None:
        """Keep one survivor's answer (checked for the asked-for peers)."""
        request = self._request
        if request is None:
            raise ProtocolError("No unmask request was made in this round.")
        if response.job_id != request.job_id or response.round != request.round:
            raise ProtocolError("An unmask response of another job or round was offered.")
        sender = response.sender
        neighbours = (
            set(self._graph.neighbours(sender)) if sender in self._graph.node_set else set()
        )
        if (
            sender not in request.survivors
            or sender in self._responses
            or not set(response.self_mask_shares) <= (neighbours | {sender}) & request.survivors
            or sender not in response.self_mask_shares
            or set(response.pair_keys) != neighbours & request.dropped
        ):
            raise ProtocolError("An unmask response must answer the request, once per survivor.")
        self._responses[sender] = response

    def aggregate(self) -> dict[str, UInt64Array]:
        """The exact Z_2^(64·w) sums of the survivors' inputs, per statistic.

        Needs t seed shares of every survivor and, for each dropout, the round keys of every
        surviving neighbour (else ProtocolError); a rebuilt seed that misses its commitment
        is an IntegrityError.
        """
        c = self._config
        request = self._request
        if request is None:
            raise ProtocolError("No unmask request was made in this round.")
        survivors = sorted(request.survivors)
        held: dict[str, list[bytes]] = {u: [] for u in survivors}  # owner -> shares
        for _, response in sorted(self._responses.items()):
            for owner, share in response.self_mask_shares.items():
                held[owner].append(share)
        xs, ys = [], []
        for u in survivors:
            points = [shamir.share_from_bytes(s, SEED_BYTES) for s in held[u][: c.threshold]]
            if len(points) < c.threshold:
                raise ProtocolError(
                    f"The round cannot be unmasked: {len(points)} shares of the seed of "
                    f"{u!r} arrived, fewer than threshold={c.threshold}."
                )
            xs.append([x for x, _ in points])
            ys.append([y for _, y in points])
        try:
            seeds = shamir.combine_many(
                np.asarray(xs, dtype=np.uint64), np.asarray(ys, dtype=np.uint64), SEED_BYTES
            )
        except ValueError:
            raise IntegrityError("integrity check failed") from None
        for u, seed in zip(survivors, seeds, strict=True):
            expected = _prg.seed_commitment(seed, job_id=c.job_id, round_no=self._round, owner=u)
            if expected != self._inputs[u].seed_commitment:
                raise IntegrityError("integrity check failed")
        pairs: list[tuple[str, str]] = []  # (survivor v, dropout d)
        for d in sorted(request.dropped):
            for v in self._graph.neighbours(d):
                if v not in request.survivors:
                    continue
                if v not in self._responses:
                    raise ProtocolError(
                        f"The round cannot be unmasked: survivor {v!r} did not answer the "
                        f"unmasking, and only it can remove its mask with dropout {d!r}."
                    )
                pairs.append((v, d))
        flat = np.concatenate([self._sums[k].reshape(-1) for k in sorted(self._sums)])
        layout = self._layout
        if layout is None:
            raise ProtocolError("No masked input arrived in this round.")
        stream = _prg.Keystream(flat.size)
        for u, seed in zip(survivors, seeds, strict=True):
            layout.subtract(
                flat,
                stream.words(
                    _prg.self_mask_key(seed, job_id=c.job_id, round_no=self._round, owner=u)
                ),
            )
        for v, d in pairs:
            key = self._responses[v].pair_keys[d]
            if len(key) != _prg.KEY_BYTES:
                raise ProtocolError(f"survivor {v!r} revealed a malformed round key with {d!r}.")
            mask = stream.words(key)
            if v < d:  # v added +PRG(s_vd)
                layout.subtract(flat, mask)
            else:
                layout.add(flat, mask)
        return _unflatten(flat, self._shapes)
