"""The participant agent's configuration, read from ``participant.toml``.

Tables: ``[participant]`` (id, coordinator_url (else the one a bundled invite recorded at
enrolment), counting_url, token, state_dir, audit_log, identity_key), ``[tls]`` (optional,
:mod:`fedclust.infra.tls`; ``ca`` defaults to the CA the enrolment pinned), ``[peers]``
(optional: peers' Ed25519 identity keys), ``[data]`` (path, columns, label_column, stream,
memory_mb, missing, decimal, encoding), ``[model]`` (optional: ``device``, where the
model-based algorithms train: ``auto``, the default, ``cpu``, ``cuda`` or ``cuda:N``; see
:mod:`participant.deep.device`) and ``[policy]`` (optional:
:class:`~participant.policy.Policy`; its ``row_bound`` and ``value_bound`` default to "auto",
derived from the data and declared in the clear). :class:`ParticipantConfig` is the parsed
file; :class:`DataSource` its data.

Contracts: relative paths resolve against the config file's folder; every error (a
``ValueError``) names the file and the key; the token never appears in a message or a repr.
:meth:`ParticipantConfig.load` lays the environment over the file, or reads it alone
(:mod:`fedclust.infra.config_env`). Data: CSV, gzip CSV and ARFF
(:func:`fedclust.data.loaders.load_dataset`), ``.npy`` (no pickles), Parquet with ``pyarrow``.

Design notes: ``docs/participant-config.md`` (§ ``participant.toml``: every key and default).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from fedclust.core.validation import FloatArray, check_data
from fedclust.infra.config_env import EnvSchema, tls_schema
from fedclust.infra.config_toml import only_keys
from fedclust.infra.tls import CLIENT_KEYS, TlsSettings
from fedclust.participant.deep.device import check_device
from fedclust.participant.policy import (
    PROTECTIONS,
    ROSTER_MEMBERS,
    ROSTER_RULES,
    Policy,
)
from fedclust.protocol import algorithms
from fedclust.protocol.maths.declaration import is_power_of_two
from fedclust.protocol.maths.rows import (
    DEFAULT_BUDGET_BYTES,
    ChunkedRows,
    RowSource,
    as_rows,
    chunk_rows,
)

if TYPE_CHECKING:
    from fedclust.data.loaders import LoadedData

__all__ = [
    "ENROLLED_CA_FILE",
    "ENROLLED_TOKEN_FILE",
    "ENROLLED_URL_FILE",
    "DataSource",
    "ParticipantConfig",
    "enrolled_ca_path",
    "enrolled_token_path",
    "enrolled_url_path",
    "load_data",
]

#: The file in the state folder holding the token ``fedclust participant enrol`` received.
ENROLLED_TOKEN_FILE = "participant.token"
#: The files in which enrolling with a bundled invite records the coordinator's URL and the
#: CA certificate it pinned.
ENROLLED_URL_FILE = "coordinator.url"
ENROLLED_CA_FILE = "coordinator-ca.pem"

#: Tokens that are an example's placeholder, not a credential (REPLACE-WITH-..., <...>).
_PLACEHOLDER = re.compile(r"(?i)replace|change[-_ ]?me|^<.*>$|your[-_ ]token|^todo")

_IDENTIFIER = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_PUBLIC_KEY = re.compile(r"^[A-Za-z0-9+/]{43}=$")
_PARQUET_SUFFIXES = (".parquet", ".pq")

_INDEX_OR_NAME = Annotated[int | str, Field(union_mode="left_to_right")]
#: The settings ``FEDCLUST_...`` variables and secret files may give (infra.config_env).
_ENV = EnvSchema({
    "participant": {
        "id": str, "coordinator_url": str, "counting_url": str, "token": str,
        "state_dir": str, "audit_log": str, "identity_key": str,
    },
    "data": {
        "path": str, "columns": list[str] | list[int], "label_column": _INDEX_OR_NAME,
        "stream": bool, "memory_mb": int, "missing": str, "decimal": str, "encoding": str,
    },
    "policy": {
        "allowed_algorithms": list[str], "min_cluster_size": int, "enforce_fcm_rule": bool,
        "max_rounds": int, "row_bound": int | Literal["auto"],
        "value_bound": float | Literal["auto"], "rosters": str,
        "accepted_rosters": list[list[str]], "roster_min_difference": int,
        "roster_members": str, "protections": list[str],
    },
    "peers": dict[str, str],
    "model": {"device": str},
    "tls": tls_schema(CLIENT_KEYS),
})


@dataclass(frozen=True)
class DataSource:
    """Where the participant's rows are: a file and, optionally, the columns to use.

    ``columns`` are names for tabular files and integer indices for ``.npy`` arrays;
    None takes every numeric column (but ``label_column``). ``label_column`` (a name, or an
    index for ``.npy``) holds integer class labels for the model-based algorithms; a tabular
    file with a label column must list its feature ``columns``.
    """

    path: Path
    columns: tuple[str, ...] | tuple[int, ...] | None = None
    label_column: str | int | None = None
    stream: bool = False
    memory_mb: int = DEFAULT_BUDGET_BYTES >> 20
    missing: Literal["fail", "drop"] = "fail"
    decimal: Literal[".", ","] = "."
    encoding: str = "utf-8"

    def load(self) -> FloatArray:
        """The rows as a finite float64 array of shape (n_samples, n_features)."""
        return load_data(self)

    def rows(self) -> RowSource:
        """The rows as the agent computes on them: in memory, or with ``stream`` re-read from
        the file in chunks of ``memory_mb`` for every statistic (``fedclust.data.stream``)."""
        if not self.stream:
            return as_rows(self.load(), name=f"data file {self.path}")
        return stream_data(self)

    def load_labels(self) -> NDArray[np.int64] | None:
        """The integer labels of ``label_column`` (None without one).

        Raises:
            ValueError: the column is missing or holds a value that is not a whole number.
        """
        return load_labels(self)


@dataclass(frozen=True)
class ParticipantConfig:
    """Everything the agent needs: identity, services, credentials, data and policy."""

    id: str
    coordinator_url: str
    counting_url: str
    token: str | None = field(repr=False)
    state_dir: Path
    data: DataSource
    policy: Policy = field(default_factory=Policy)
    audit_log: Path | None = None
    identity_key: Path | None = None
    peers: Mapping[str, str] = field(default_factory=dict)
    tls: TlsSettings = field(default_factory=TlsSettings)
    device: str = "auto"

    @property
    def auth_headers(self) -> dict[str, str]:
        """The Authorization header of every request; none when the certificate alone
        authenticates (no token)."""
        return {} if self.token is None else {"Authorization": f"Bearer {self.token}"}

    @property
    def credential(self) -> str:
        """What authenticates this participant, for messages: its token or its certificate."""
        return "token" if self.token is not None else "client certificate"

    @property
    def audit_path(self) -> Path:
        """The audit log (:mod:`participant.audit`); ``audit-<id>.jsonl`` when not set."""
        return self.audit_log if self.audit_log is not None else Path(f"audit-{self.id}.jsonl")

    @property
    def identity_path(self) -> Path:
        """The Ed25519 identity key file (``participant.secure.load_identity``)."""
        if self.identity_key is not None:
            return self.identity_key
        return Path(f"identity-{self.id}.key")

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _IDENTIFIER.match(self.id):
            raise ValueError(
                "[participant] id must be 1-64 characters of letters, digits, '_', '.', '-'."
            )
        for key in ("coordinator_url", "counting_url"):
            url = getattr(self, key)
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError(f"[participant] {key} must be an http:// or https:// URL.")
            object.__setattr__(self, key, url.rstrip("/"))
        if self.token is None:
            if self.tls.certificate is None:
                raise ValueError(
                    "[participant] has no token: give the token the coordinator's operator "
                    "issued, or, where the services accept certificates alone, this "
                    "organisation's [tls] certificate and key."
                )
            return
        if not isinstance(self.token, str) or not self.token.strip():
            raise ValueError("[participant] token must be a non-empty string.")
        if _PLACEHOLDER.search(self.token):
            raise ValueError(
                "[participant] token is still a placeholder: put in the token the "
                "coordinator's operator issued to this participant."
            )

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ParticipantConfig:
        """Read ``participant.toml`` alone, its ``x_file`` keys (``token_file``) read from
        their files (the data file is read later, by :meth:`DataSource.load`).

        Raises:
            ValueError: the file is missing or not TOML, a table or key is missing, unknown or
                of the wrong type; the message starts with the file's path.
        """
        return cls.load(path, environment=False)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str] | None = None, *, environment: bool = True
    ) -> ParticipantConfig:
        """``participant.toml`` (optional) with the ``FEDCLUST_`` variables and secret files
        laid over it (:mod:`fedclust.infra.config_env`); without a file, relative paths
        resolve against the working directory.

        Raises:
            ValueError: as :meth:`from_file`, or a variable or secret file is unknown,
                unreadable or of the wrong type; the message names it, never its value.
        """
        layered = _ENV.load(path, what="the participant's config file", environment=environment)
        return layered.build(lambda doc, base: _from_mapping(doc, base=base))


def _from_mapping(doc: Mapping[str, Any], *, base: Path) -> ParticipantConfig:
    only_keys(doc, {"participant", "data", "policy", "peers", "tls", "model"}, where="the file")
    section = _table(doc, "participant", required=True)
    only_keys(
        section,
        {
            "id", "coordinator_url", "counting_url", "token", "state_dir", "audit_log",
            "identity_key",
        },
        where="[participant]",
    )
    for key in ("id", "counting_url"):
        _get(section, key, str, where="[participant]", required=True)
    pid = section["id"]
    state_dir = _get(section, "state_dir", str, where="[participant]") or f"state-{pid}"
    coordinator_url = _coordinator_url(section, _resolve(base, state_dir))
    tls = _with_enrolled_ca(
        TlsSettings.from_table(doc.get("tls"), base=base, allowed=CLIENT_KEYS),
        _resolve(base, state_dir),
    )
    token = _token(section, _resolve(base, state_dir), certificate=tls.certificate is not None)
    audit_log = _get(section, "audit_log", str, where="[participant]") or f"audit-{pid}.jsonl"
    identity = _get(section, "identity_key", str, where="[participant]") or f"identity-{pid}.key"

    data = _table(doc, "data", required=True)
    only_keys(
        data,
        {"path", "columns", "label_column", "stream", "memory_mb", "missing", "decimal",
         "encoding"},
        where="[data]",
    )
    data_path = _get(data, "path", str, where="[data]", required=True)
    columns = _columns(data.get("columns"))
    label = data.get("label_column")
    if label is not None and not (
        (isinstance(label, str) and label)
        or (isinstance(label, int) and not isinstance(label, bool) and label >= 0)
    ):
        raise ValueError("[data] label_column must be a column name (or, for .npy, an index).")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise ValueError("[data] stream must be true or false.")
    memory_mb = data.get("memory_mb", DEFAULT_BUDGET_BYTES >> 20)
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or not (
        16 <= memory_mb <= 1 << 20
    ):
        raise ValueError("[data] memory_mb must be a whole number of MiB in [16, 1048576].")
    if stream and label is not None:
        raise ValueError(
            "[data] stream = true computes cluster statistics only; a label_column (for the "
            "model-based algorithms) needs the rows in memory: remove one of them."
        )
    missing = data.get("missing", "fail")
    if missing not in ("fail", "drop"):
        raise ValueError('[data] missing must be "fail" or "drop".')
    decimal = data.get("decimal", ".")
    if decimal not in (".", ","):
        raise ValueError('[data] decimal must be "." or ",".')
    encoding = data.get("encoding", "utf-8")
    if not isinstance(encoding, str) or not encoding:
        raise ValueError("[data] encoding must be the name of a text encoding, e.g. latin-1.")
    if stream and (missing, decimal, encoding.lower()) != ("fail", ".", "utf-8"):
        raise ValueError(
            "[data] stream = true reads UTF-8 files with decimal points and no missing values:"
            " convert the file, or hold the rows in memory (stream = false) to use missing, "
            "decimal or encoding."
        )

    peers = _peers(_table(doc, "peers", required=False))
    model = _table(doc, "model", required=False)
    only_keys(model, {"device"}, where="[model]")
    device = check_device(model.get("device", "auto"), where="[model] device")
    return ParticipantConfig(
        id=pid,
        coordinator_url=coordinator_url,
        counting_url=section["counting_url"],
        token=token,
        state_dir=_resolve(base, state_dir),
        data=DataSource(
            path=_resolve(base, data_path), columns=columns, label_column=label, stream=stream,
            memory_mb=memory_mb, missing=missing, decimal=decimal, encoding=encoding,
        ),
        policy=_policy(_table(doc, "policy", required=False), peers=peers),
        peers=peers,
        device=device,
        audit_log=_resolve(base, audit_log),
        identity_key=_resolve(base, identity),
        tls=tls,
    )


def enrolled_token_path(state_dir: Path) -> Path:
    """Where ``fedclust participant enrol`` keeps the token it received (0600, in the state
    folder, so the config file never holds a secret it did not hold before)."""
    return state_dir / ENROLLED_TOKEN_FILE


def enrolled_url_path(state_dir: Path) -> Path:
    """Where enrolling with a bundled invite records the coordinator's URL, which the agent
    uses when ``[participant] coordinator_url`` is absent."""
    return state_dir / ENROLLED_URL_FILE


def enrolled_ca_path(state_dir: Path) -> Path:
    """Where enrolling with a bundled invite keeps the CA certificate it pinned, which the
    agent trusts when ``[tls] ca`` is absent."""
    return state_dir / ENROLLED_CA_FILE


def _coordinator_url(section: Mapping[str, Any], state_dir: Path) -> str:
    """``[participant] coordinator_url``, else the one the enrolment recorded."""
    url = _get(section, "coordinator_url", str, where="[participant]")
    if url is not None:
        return str(url)
    try:
        return enrolled_url_path(state_dir).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise ValueError(
            "[participant] is missing 'coordinator_url', and no enrolment recorded one: "
            "name the coordinator, or enrol with the invite the federation's admin gave you "
            "(`fedclust participant enrol --invite INVITE --config FILE`)."
        ) from None


def _with_enrolled_ca(tls: TlsSettings, state_dir: Path) -> TlsSettings:
    """``tls`` trusting the CA the enrolment pinned, where ``[tls] ca`` names none."""
    pinned = enrolled_ca_path(state_dir)
    return dataclasses.replace(tls, ca=pinned) if tls.ca is None and pinned.is_file() else tls


def _token(section: Mapping[str, Any], state_dir: Path, *, certificate: bool) -> str | None:
    """``[participant] token``; when absent or a placeholder, the enrolment's token file;
    None when there is neither but a client ``certificate`` (it alone authenticates)."""
    token = _get(section, "token", str, where="[participant]")
    if token is not None and not _PLACEHOLDER.search(token):
        return str(token)
    path = enrolled_token_path(state_dir)
    try:
        enrolled = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        enrolled = ""
    if enrolled:
        return enrolled
    if token is None and certificate:
        return None
    if token is None:
        raise ValueError(
            f"[participant] is missing 'token', and there is no enrolment token at {path}: "
            "run `fedclust participant enrol --invite INVITE --config FILE` with the invite "
            "the federation's admin gave you."
        )
    return str(token)  # a placeholder: refused by ParticipantConfig with its own message


def _policy(table: Mapping[str, Any], *, peers: Mapping[str, str]) -> Policy:
    where = "[policy]"
    only_keys(
        table,
        {
            "allowed_algorithms", "min_cluster_size", "enforce_fcm_rule", "max_rounds",
            "row_bound", "value_bound", "rosters", "accepted_rosters", "roster_min_difference",
            "roster_members", "protections",
        },
        where=where,
    )
    default = Policy()
    allowed: frozenset[str] = default.allowed_algorithms
    if "allowed_algorithms" in table:
        names = table["allowed_algorithms"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"{where} allowed_algorithms must be a list of algorithm names.")
        known = algorithms.names()
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ValueError(
                f"{where} allowed_algorithms has unknown algorithm(s) "
                f"{', '.join(repr(n) for n in unknown)}; known: {', '.join(sorted(known))}."
            )
        if not names:
            raise ValueError(f"{where} allowed_algorithms must name at least one algorithm.")
        allowed = frozenset(names)
    min_cluster_size = _get(table, "min_cluster_size", int, where=where)
    max_rounds = _get(table, "max_rounds", int, where=where)
    enforce = _get(table, "enforce_fcm_rule", bool, where=where)
    for key, value in (("min_cluster_size", min_cluster_size), ("max_rounds", max_rounds)):
        if value is not None and value < 1:
            raise ValueError(f"{where} {key} must be >= 1; got {value}.")
    rule = _get(table, "rosters", str, where=where) or default.rosters
    if rule not in ROSTER_RULES:
        raise ValueError(f"{where} rosters must be one of {', '.join(ROSTER_RULES)}.")
    difference = _get(table, "roster_min_difference", int, where=where)
    if difference is not None and difference < 2:
        raise ValueError(f"{where} roster_min_difference must be >= 2; got {difference}.")
    accepted = _rosters(table.get("accepted_rosters"))
    if (rule == "fixed") != bool(accepted):
        raise ValueError(
            f"{where} accepted_rosters (a list of lists of participant ids) is needed with "
            'rosters = "fixed", and only then.'
        )
    members = _get(table, "roster_members", str, where=where) or default.roster_members
    if members not in ROSTER_MEMBERS:
        raise ValueError(f"{where} roster_members must be one of {', '.join(ROSTER_MEMBERS)}.")
    if members == "known" and not peers:
        raise ValueError(
            f'{where} roster_members = "known" needs the organisations this participant '
            "knows: list them with their identity keys in the [peers] table."
        )
    return Policy(
        allowed_algorithms=allowed,
        min_cluster_size=default.min_cluster_size if min_cluster_size is None else min_cluster_size,
        enforce_fcm_rule=default.enforce_fcm_rule if enforce is None else enforce,
        max_rounds=default.max_rounds if max_rounds is None else max_rounds,
        row_bound=_row_bound(table.get("row_bound", "auto")),
        value_bound=_value_bound(table.get("value_bound", "auto")),
        rosters=rule,
        accepted_rosters=accepted,
        roster_min_difference=(
            default.roster_min_difference if difference is None else difference
        ),
        roster_members=members,
        known_peers=frozenset(peers),
        protections=_protections(table.get("protections"), default.protections),
    )


def _protections(value: object, default: frozenset[str]) -> frozenset[str]:
    """``[policy] protections``: the protections of the jobs this participant takes part in
    (absent: ``default``, without "none")."""
    if value is None:
        return default
    if (
        isinstance(value, list) and value
        and all(isinstance(v, str) and v in PROTECTIONS for v in value)
    ):
        return frozenset(value)
    raise ValueError(
        "[policy] protections must be a non-empty list of protections among "
        f"{', '.join(repr(p) for p in sorted(PROTECTIONS))} (\"none\" only to take part in "
        "unprotected jobs, whose statistics reach the coordinator in the clear)."
    )


def _row_bound(value: object) -> int | None:
    """``[policy] row_bound``: "auto" (None) or a power of two."""
    if value == "auto":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and is_power_of_two(value):
        return value
    raise ValueError(
        '[policy] row_bound must be "auto" or a power of two R (1, 2, 4, ...) declaring '
        "R/2 < rows <= R."
    )


def _value_bound(value: object) -> float | None:
    """``[policy] value_bound``: "auto" (None) or a finite number > 0."""
    if value == "auto":
        return None
    if (
        isinstance(value, int | float) and not isinstance(value, bool)
        and math.isfinite(value) and value > 0
    ):
        return float(value)
    raise ValueError(
        '[policy] value_bound must be "auto" or a number B > 0 declaring |x| <= B for every '
        "raw value."
    )


def _rosters(value: object) -> frozenset[frozenset[str]]:
    """``[policy] accepted_rosters``: lists of participant ids (absent: none)."""
    if value is None:
        return frozenset()
    if isinstance(value, list) and all(
        isinstance(r, list) and r and all(isinstance(p, str) and _IDENTIFIER.match(p) for p in r)
        for r in value
    ):
        return frozenset(frozenset(r) for r in value)
    raise ValueError(
        "[policy] accepted_rosters must be a list of non-empty lists of participant ids."
    )


def _columns(value: object) -> tuple[str, ...] | tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, list) and value:
        if all(isinstance(c, str) and c for c in value):
            return tuple(str(c) for c in value)
        if all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value):
            return tuple(int(c) for c in value)
    raise ValueError(
        "[data] columns must be a non-empty list of column names (or, for a .npy file, "
        "of column indices >= 0)."
    )


def _resolve(base: Path, path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else base / p


def _peers(table: Mapping[str, Any]) -> dict[str, str]:
    """``[peers]``: peer id -> its Ed25519 public key (base64 of 32 bytes), pinned up front."""
    out = {}
    for peer, key in table.items():
        if not _IDENTIFIER.match(peer) or not isinstance(key, str) or not _PUBLIC_KEY.match(key):
            raise ValueError(
                f"[peers] {peer!r} must map a participant id to its Ed25519 public key "
                "(44 characters of base64)."
            )
        out[peer] = key
    return out


def _table(doc: Mapping[str, Any], key: str, *, required: bool) -> Mapping[str, Any]:
    value = doc.get(key)
    if value is None:
        if required:
            raise ValueError(f"missing the [{key}] table.")
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a table ([{key}]).")
    return value


def _get(
    table: Mapping[str, Any], key: str, kind: type, *, where: str, required: bool = False
) -> Any:
    if key not in table:
        if required:
            raise ValueError(f"{where} is missing {key!r}.")
        return None
    value = table[key]
    wrong_int = kind is int and isinstance(value, bool)
    if wrong_int or not isinstance(value, kind):
        raise ValueError(f"{where} {key} must be a {kind.__name__}; got a {type(value).__name__}.")
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{where} {key} must not be empty.")
    return value




# -- data files ----------------------------------------------------------------------------------
def load_data(source: DataSource) -> FloatArray:
    """Read ``source`` into a finite float64 array of shape (n_samples, n_features).

    Raises:
        ValueError: the file is missing or unreadable, a column is unknown or not numeric,
            a value is NaN/infinite, or Parquet is asked for without ``pyarrow`` installed.
            Messages name the file and the column, never a data value.
    """
    return load_rows(source).X


def load_rows(source: DataSource, *, id_column: str | None = None) -> LoadedData:
    """:func:`load_data`'s rows with each row's index among the file's data rows (rows left
    out by ``missing = "drop"`` counted) and, if asked, the text of ``id_column`` (a CSV,
    ARFF or Parquet column): what ``fedclust participant assign`` writes beside its labels.

    Raises:
        ValueError: as :func:`load_data`, or an ``id_column`` of a ``.npy`` file.
    """
    from fedclust.data.loaders import LoadedData, load_dataset  # pyarrow: imported lazily

    path = source.path
    if not path.is_file():
        raise ValueError(f"data file {path} does not exist.")
    name = path.name.lower()
    label = source.label_column
    if label is not None and source.columns is None and not name.endswith(".npy"):
        raise ValueError(
            f"[data] {path.name} has a label_column: list its feature columns in [data] columns."
        )
    ids = rows = None
    if name.endswith(".npy"):
        if id_column is not None:
            raise ValueError(f"--id-column needs a CSV, ARFF or Parquet file; {path.name} is .npy.")
        columns = source.columns
        if columns is None and isinstance(label, int):
            width = _load_npy(path, None).shape[1]
            columns = tuple(i for i in range(width) if i != label)
        X = _load_npy(path, columns)
    elif name.endswith(_PARQUET_SUFFIXES):
        X = _load_parquet(path, _names(source.columns, path))
        if id_column is not None:
            ids = _parquet_text(path, id_column)
    else:
        names = _names(source.columns, path)
        loaded = load_dataset(
            path, columns=None if names is None else list(names), missing=source.missing,
            decimal=source.decimal, encoding=source.encoding, id_column=id_column,
            naming="config",
        )
        X, rows, ids = loaded.X, loaded.rows, loaded.ids
    X = check_data(X, name=f"data file {path}")
    if rows is None:
        rows = np.arange(X.shape[0], dtype=np.int64)
    return LoadedData(X, rows=rows, ids=ids)


def stream_data(source: DataSource) -> RowSource:
    """``source`` re-read in chunks: Parquet and CSV through pyarrow, ``.npy`` memory-mapped.

    Raises:
        ValueError: the file is missing, or is ARFF (which cannot be streamed).
    """
    path = source.path
    if not path.is_file():
        raise ValueError(f"data file {path} does not exist.")
    budget = source.memory_mb << 20
    name = path.name.lower()
    if name.endswith(".npy"):
        return _npy_chunks(path, source.columns, budget)
    from fedclust.data.stream import csv_rows, parquet_rows

    names = _names(source.columns, path)
    columns = None if names is None else list(names)
    if name.endswith(_PARQUET_SUFFIXES):
        return parquet_rows(path, columns=columns, budget_bytes=budget)
    try:
        return csv_rows(path, columns=columns, budget_bytes=budget)
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from None


def _npy_chunks(
    path: Path, columns: tuple[str, ...] | tuple[int, ...] | None, budget: int
) -> ChunkedRows:
    array = np.load(path, mmap_mode="r", allow_pickle=False)
    if array.ndim != 2:
        raise ValueError(f"data file {path} must hold a 2-D array; it has {array.ndim} axes.")
    if columns is not None and not all(isinstance(c, int) for c in columns):
        raise ValueError(f"[data] columns of the .npy file {path.name} must be column indices.")
    idx = list(range(array.shape[1])) if columns is None else [int(c) for c in columns]
    if any(i >= array.shape[1] for i in idx):
        raise ValueError(f"[data] columns are out of range: {path.name} has {array.shape[1]}.")
    step = chunk_rows(len(idx), budget_bytes=budget)

    def read() -> Iterator[FloatArray]:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
        for start in range(0, mapped.shape[0], step):
            yield np.asarray(mapped[start : start + step, idx], dtype=np.float64)

    return ChunkedRows(
        read, n_rows=int(array.shape[0]), n_features=len(idx), name=f"data file {path}"
    )


def load_labels(source: DataSource) -> NDArray[np.int64] | None:
    """The labels of ``source.label_column`` as int64 (None when it has none)."""
    label = source.label_column
    if label is None:
        return None
    path = source.path
    if not path.is_file():
        raise ValueError(f"data file {path} does not exist.")
    if path.name.lower().endswith(".npy"):
        if not isinstance(label, int):
            raise ValueError(f"[data] label_column of the .npy file {path.name} must be an index.")
        y = _load_npy(path, (label,))[:, 0]
    elif path.name.lower().endswith(_PARQUET_SUFFIXES):
        y = _load_parquet(path, (str(label),))[:, 0]
    else:
        from fedclust.data.loaders import load_dataset

        y = np.asarray(
            load_dataset(path, columns=[str(label)], decimal=source.decimal,
                         encoding=source.encoding, naming="config").X,
            dtype=np.float64,
        )[:, 0]
    if not (np.isfinite(y).all() and (y == np.round(y)).all() and (y >= 0).all()):
        raise ValueError(
            f"[data] label_column of {path.name} must hold whole numbers >= 0 (class labels)."
        )
    return y.astype(np.int64)


def _names(columns: Sequence[str | int] | None, path: Path) -> tuple[str, ...] | None:
    if columns is not None and not all(isinstance(c, str) for c in columns):
        raise ValueError(
            f"[data] columns of {path.name} must be column names; indices are for .npy files."
        )
    return None if columns is None else tuple(str(c) for c in columns)


def _load_npy(path: Path, columns: Sequence[str | int] | None) -> FloatArray:
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"data file {path} is not a readable .npy array ({exc}).") from None
    if not isinstance(arr, np.ndarray) or arr.ndim != 2:
        raise ValueError(f"data file {path} must hold a 2-D array (rows × columns).")
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise ValueError(f"data file {path} holds {arr.dtype} values; numbers are needed.")
    if columns is None:
        return np.asarray(arr, dtype=np.float64)
    if not all(isinstance(c, int) for c in columns):
        raise ValueError(f"[data] columns of the .npy file {path.name} must be column indices.")
    idx = [int(c) for c in columns]
    bad = [i for i in idx if i >= arr.shape[1]]
    if bad:
        raise ValueError(
            f"[data] columns {bad} are out of range: {path.name} has {arr.shape[1]} columns."
        )
    return np.asarray(arr[:, idx], dtype=np.float64)


def _parquet_text(path: Path, column: str) -> NDArray[np.str_]:
    """One column of a Parquet file as text (read after :func:`_load_parquet`, so pyarrow is
    importable)."""
    import pyarrow.parquet as pq

    if column not in pq.read_schema(path).names:
        raise ValueError(f"--id-column: {path.name} has no column {column!r}.")
    values = pq.read_table(path, columns=[column]).column(0).to_pylist()
    return np.array(["" if v is None else str(v) for v in values], dtype=np.str_)


def _load_parquet(path: Path, columns: tuple[str, ...] | None) -> FloatArray:
    try:
        importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise ValueError(
            f"data file {path} is Parquet, which needs the pyarrow package; it is not "
            "installed. Install pyarrow or convert the file to CSV or .npy."
        ) from None
    from fedclust.data.stream import parquet_rows

    # Read in chunks into one matrix (about the data's size plus one chunk, no column copies).
    return parquet_rows(path, columns=columns).in_memory().X
