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
file (a pydantic dataclass checked by the tables' rules, built from it or directly);
:class:`DataSource` its data.

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
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, TypeVar, cast

import numpy as np
from numpy.typing import NDArray
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic import dataclasses as pydantic_dataclasses

from fedclust.core.models import Identifier
from fedclust.core.validation import IDENTIFIER_TEXT, FloatArray, check_data, is_identifier
from fedclust.infra.config_env import EnvSchema
from fedclust.infra.config_toml import DATACLASS_TABLE, TABLE, ConfigFile, parse
from fedclust.infra.tls import ClientTls, TlsSettings
from fedclust.participant.deep.device import check_device
from fedclust.participant.policy import (
    PROTECTIONS_TEXT,
    ROSTER_MEMBERS,
    ROSTER_RULES,
    ROW_BOUND_TEXT,
    VALUE_BOUND_TEXT,
    MaxRounds,
    MinClusterSize,
    Policy,
    RosterMembers,
    RosterMinDifference,
    RosterRule,
    check_algorithms,
    check_protections,
    check_row_bound,
    check_value_bound,
)
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

_PUBLIC_KEY = re.compile(r"^[A-Za-z0-9+/]{43}=$")
_PARQUET_SUFFIXES = (".parquet", ".pq")

_NON_EMPTY = Annotated[str, Field(pattern=r"\S")]
_URL_TEXT = "an http:// or https:// URL"
_Number = TypeVar("_Number", int, float)


def _service_url(url: str, info: ValidationInfo) -> str:
    """The rule of ``[participant] coordinator_url`` and ``counting_url``, whether the file, a
    variable or the enrolment (:func:`enrolled_url_path`) gives them: http(s), kept without
    a trailing slash."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"[participant] {info.field_name} must be {_URL_TEXT}.")
    return url.rstrip("/")


def _not_placeholder(token: str) -> str:
    """The token the agent presents: never an example's placeholder (:data:`_PLACEHOLDER`)."""
    if _PLACEHOLDER.search(token):
        raise ValueError(
            "[participant] token is still a placeholder: put in the token the "
            "coordinator's operator issued to this participant."
        )
    return token


_URL = Annotated[str, AfterValidator(_service_url)]


class _Table(BaseModel):
    model_config = ConfigDict(**TABLE, frozen=True)


class ParticipantTable(_Table):
    """The ``[participant]`` table; absent paths default to ``<kind>-<id>`` beside the file."""

    id: Identifier = Field(description=IDENTIFIER_TEXT)
    coordinator_url: _URL | None = Field(default=None, description=_URL_TEXT)
    counting_url: _URL = Field(description=_URL_TEXT)
    token: _NON_EMPTY | None = Field(default=None, repr=False)
    state_dir: _NON_EMPTY | None = None
    audit_log: _NON_EMPTY | None = None
    identity_key: _NON_EMPTY | None = None


class DataTable(_Table):
    """The ``[data]`` table (:class:`DataSource`)."""

    path: _NON_EMPTY
    columns: (
        Annotated[list[_NON_EMPTY], Field(min_length=1)]
        | Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
        | None
    ) = Field(default=None, description=(
        "a non-empty list of column names (or, for a .npy file, of column indices >= 0)"
    ))
    label_column: Annotated[
        Annotated[int, Field(ge=0)] | _NON_EMPTY, Field(union_mode="left_to_right")
    ] | None = Field(default=None, description="a column name (or, for .npy, an index)")
    stream: bool = False
    memory_mb: int = Field(
        default=DEFAULT_BUDGET_BYTES >> 20, ge=16, le=1 << 20,
        description="a whole number of MiB in [16, 1048576]",
    )
    missing: Literal["fail", "drop"] = Field(default="fail", description='"fail" or "drop"')
    decimal: Literal[".", ","] = Field(default=".", description='"." or ","')
    encoding: str = Field(
        default="utf-8", pattern=r"\S",
        description="the name of a text encoding, e.g. latin-1",
    )

    @model_validator(mode="after")
    def _streamed(self) -> DataTable:
        if self.stream and self.label_column is not None:
            raise ValueError(
                "[data] stream = true computes cluster statistics only; a label_column (for "
                "the model-based algorithms) needs the rows in memory: remove one of them."
            )
        if self.stream and (self.missing, self.decimal, self.encoding.lower()) != (
            "fail", ".", "utf-8"
        ):
            raise ValueError(
                "[data] stream = true reads UTF-8 files with decimal points and no missing "
                "values: convert the file, or hold the rows in memory (stream = false) to use "
                "missing, decimal or encoding."
            )
        return self


class ModelTable(_Table):
    """The ``[model]`` table: where the model-based algorithms train."""

    device: str = "auto"

    @field_validator("device")
    @classmethod
    def _device(cls, device: str) -> str:
        return check_device(device, where="[model] device")


_DEFAULT_POLICY = Policy()


def _unless_auto(check: Callable[[_Number], _Number]) -> Callable[[_Number | str], _Number | str]:
    """``check`` a declared bound, but for "auto" (derived from the data)."""
    return lambda bound: bound if bound == "auto" else check(cast("_Number", bound))


class PolicyTable(_Table):
    """The ``[policy]`` table: :class:`Policy`'s keys, rules and defaults, with lists for its
    sets, ``"auto"`` for an underived bound and its ``known_peers`` from ``[peers]``."""

    allowed_algorithms: Annotated[list[str], AfterValidator(check_algorithms)] = Field(
        default_factory=lambda: sorted(_DEFAULT_POLICY.allowed_algorithms),
        description="a list of algorithm names",
    )
    min_cluster_size: MinClusterSize = _DEFAULT_POLICY.min_cluster_size
    enforce_fcm_rule: bool = _DEFAULT_POLICY.enforce_fcm_rule
    max_rounds: MaxRounds = _DEFAULT_POLICY.max_rounds
    row_bound: Annotated[int | Literal["auto"], AfterValidator(_unless_auto(check_row_bound))] = (
        Field(default="auto", description=ROW_BOUND_TEXT)
    )
    value_bound: Annotated[
        float | Literal["auto"], AfterValidator(_unless_auto(check_value_bound))
    ] = Field(default="auto", description=VALUE_BOUND_TEXT)
    rosters: RosterRule = Field(
        default=_DEFAULT_POLICY.rosters, description=f"one of {', '.join(ROSTER_RULES)}"
    )
    accepted_rosters: list[Annotated[list[Identifier], Field(min_length=1)]] = Field(
        default_factory=list, description="a list of non-empty lists of participant ids"
    )
    roster_min_difference: RosterMinDifference = _DEFAULT_POLICY.roster_min_difference
    roster_members: RosterMembers = Field(
        default=_DEFAULT_POLICY.roster_members, description=f"one of {', '.join(ROSTER_MEMBERS)}"
    )
    protections: Annotated[list[str], AfterValidator(check_protections)] = Field(
        default_factory=lambda: sorted(_DEFAULT_POLICY.protections),
        description=PROTECTIONS_TEXT,
    )

    def policy(self, *, peers: Mapping[str, str]) -> Policy:
        """The :class:`Policy` of this table, knowing the organisations of ``[peers]``.

        Raises:
            ValueError: a rule across keys (and ``[peers]``) fails; one line naming them.
        """
        keys = self.model_dump()
        bounds = {key: None if keys[key] == "auto" else keys[key]
                  for key in ("row_bound", "value_bound")}
        return parse(Policy, {**keys, **bounds, "known_peers": frozenset(peers)})


_PEER_ERROR = (
    "must map a participant id to its Ed25519 public key (44 characters of base64)"
)


class ParticipantFile(ConfigFile):
    """``participant.toml``: the schema of the file, its variables and secret files."""

    participant: ParticipantTable
    data: DataTable
    policy: PolicyTable = PolicyTable()
    peers: dict[str, str] = Field(default_factory=dict, description=(
        "a table mapping participant ids to their Ed25519 public keys (44 characters of "
        "base64)"
    ))
    model: ModelTable = ModelTable()
    tls: ClientTls | None = None

    @field_validator("peers")
    @classmethod
    def _peers(cls, peers: dict[str, str]) -> dict[str, str]:
        """``[peers]``: peer id -> its Ed25519 public key (base64 of 32 bytes), pinned up
        front."""
        for peer, key in peers.items():
            if not is_identifier(peer) or not _PUBLIC_KEY.fullmatch(key):
                raise ValueError(f"[peers] {peer!r} {_PEER_ERROR}.")
        return peers

    @model_validator(mode="after")
    def _policy(self) -> ParticipantFile:
        """The rules of :class:`Policy` across ``[policy]``'s keys and ``[peers]``."""
        self.policy.policy(peers=self.peers)
        return self


#: The settings ``FEDCLUST_...`` variables and secret files may give (infra.config_env).
_ENV = EnvSchema.of(ParticipantFile)


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


@pydantic_dataclasses.dataclass(frozen=True, config=DATACLASS_TABLE)
class ParticipantConfig:
    """Everything the agent needs: identity, services, credentials, data and policy; built by
    :meth:`load` or directly, validated by the rules of :class:`ParticipantTable` (the id, the
    URLs) and its own: a token that is no placeholder, or else a ``[tls]`` certificate."""

    id: Identifier
    coordinator_url: _URL
    counting_url: _URL
    token: Annotated[_NON_EMPTY, AfterValidator(_not_placeholder)] | None = dataclasses.field(
        repr=False
    )
    state_dir: Path
    data: DataSource
    policy: Policy = Field(default_factory=Policy)
    audit_log: Path | None = None
    identity_key: Path | None = None
    peers: Mapping[str, str] = Field(default_factory=dict)
    tls: TlsSettings = Field(default_factory=TlsSettings)
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

    @model_validator(mode="after")
    def _authenticated(self) -> Self:
        if self.token is None and self.tls.certificate is None:
            raise ValueError(
                "[participant] has no token: give the token the coordinator's operator "
                "issued, or, where the services accept certificates alone, this "
                "organisation's [tls] certificate and key."
            )
        return self

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
    file = parse(ParticipantFile, doc)
    section, data = file.participant, file.data
    pid = section.id
    state_dir = _resolve(base, section.state_dir or f"state-{pid}")
    tls = _with_enrolled_ca(TlsSettings.from_model(file.tls, base=base), state_dir)
    return parse(ParticipantConfig, dict(
        id=pid,
        coordinator_url=section.coordinator_url or _enrolled_url(state_dir),
        counting_url=section.counting_url,
        token=_token(section.token, state_dir, certificate=tls.certificate is not None),
        state_dir=state_dir,
        data=DataSource(
            path=_resolve(base, data.path),
            columns=None if data.columns is None else cast(
                "tuple[str, ...] | tuple[int, ...]", tuple(data.columns)
            ),
            label_column=data.label_column, stream=data.stream, memory_mb=data.memory_mb,
            missing=data.missing, decimal=data.decimal, encoding=data.encoding,
        ),
        policy=file.policy.policy(peers=file.peers),
        peers=file.peers,
        device=file.model.device,
        audit_log=_resolve(base, section.audit_log or f"audit-{pid}.jsonl"),
        identity_key=_resolve(base, section.identity_key or f"identity-{pid}.key"),
        tls=tls,
    ))


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


def _enrolled_url(state_dir: Path) -> str:
    """The coordinator's URL the enrolment recorded (``[participant] coordinator_url`` is
    absent)."""
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


def _token(token: str | None, state_dir: Path, *, certificate: bool) -> str | None:
    """``[participant] token``; when absent or a placeholder, the enrolment's token file;
    None when there is neither but a client ``certificate`` (it alone authenticates)."""
    if token is not None and not _PLACEHOLDER.search(token):
        return token
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
    return token  # a placeholder: refused by ParticipantConfig (_not_placeholder)


def _resolve(base: Path, path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else base / p


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
