"""Write the service's TOML config files and generate credentials.

The services read their configs with :mod:`tomllib`; Python has no TOML writer, so
:func:`dumps` is a small one for exactly what the configs need: top-level tables of
``str``/``int``/``float``/``bool``/list-of-``str`` values and arrays of such tables.

Credentials are random bearer tokens (``secrets.token_urlsafe(32)``, 256 bits); a service
stores only the SHA-256 hex of each token (:func:`token_sha256`), the holder keeps the token.
:func:`write_federation` writes a whole loopback federation (coordinator, counting service,
participants and the analyst's client config) into one folder, as ``fedclust demo`` and the
end-to-end tests use it.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, TypeAlias

from fedclust.crypto.tokens import new_token, token_sha256
from fedclust.protocol import algorithms

__all__ = [
    "Credential",
    "Document",
    "FederationFiles",
    "analyst_config",
    "coordinator_config",
    "counting_config",
    "dumps",
    "new_credential",
    "participant_config",
    "token_sha256",
    "write_federation",
    "write_toml",
]

Scalar: TypeAlias = str | int | float | bool
Value: TypeAlias = Scalar | Sequence[str]
Table: TypeAlias = Mapping[str, Value]
Document: TypeAlias = Mapping[str, Table | Sequence[Table]]

_BARE_KEY: Final = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES: Final = {
    "\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r",
}


# -- TOML writer ------------------------------------------------------------------------------
def _string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _key(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError("TOML keys must be non-empty strings")
    return key if _BARE_KEY.match(key) else _string(key)


def _value(value: Value, *, where: str) -> str:
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # shortest round-trip form; always has '.', 'e' or both
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return "[" + ", ".join(_string(v) for v in value) + "]"
    raise TypeError(
        f"{where} must be a str, int, float, bool or list of str; got {type(value).__name__}"
    )


def _table_body(table: Table, *, where: str) -> list[str]:
    if not isinstance(table, Mapping):
        raise TypeError(f"{where} must be a mapping of keys to values")
    return [f"{_key(k)} = {_value(v, where=f'{where}.{k}')}" for k, v in table.items()]


def dumps(document: Document) -> str:
    """The TOML text of ``document``.

    Each top-level key maps to a table (a mapping, written ``[name]``) or to a list of
    tables (written ``[[name]]`` once per element). Values are ``str``, ``int``, finite or
    infinite ``float``, ``bool`` or lists of ``str``; :func:`tomllib.loads` reads back an
    equal document.
    """
    blocks: list[str] = []
    for name, content in document.items():
        if isinstance(content, Mapping):
            blocks.append("\n".join([f"[{_key(name)}]", *_table_body(content, where=name)]))
        elif isinstance(content, Sequence) and not isinstance(content, str):
            for i, table in enumerate(content):
                body = _table_body(table, where=f"{name}[{i}]")
                blocks.append("\n".join([f"[[{_key(name)}]]", *body]))
        else:
            raise TypeError(f"top-level {name!r} must be a table or a list of tables")
    return "\n\n".join(blocks) + "\n"


def write_toml(path: str | os.PathLike[str], document: Document, *, private: bool = False) -> Path:
    """Write ``document`` to ``path``; ``private`` makes the file owner-readable only (0600)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(document)
    if private:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(target, 0o600)
    else:
        target.write_text(text, encoding="utf-8")
    return target


# -- credentials ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Credential:
    """A bearer token and its SHA-256 hex; ``repr`` never shows the token."""

    token: str = field(repr=False)
    token_sha256: str


def new_credential() -> Credential:
    """A fresh random token and its hash (:mod:`crypto.tokens`)."""
    token = new_token()
    return Credential(token=token, token_sha256=token_sha256(token))


# -- the config kinds -------------------------------------------------------------------------
def coordinator_config(
    *,
    host: str,
    port: int,
    database_url: str,
    counting_url: str,
    counting_token: str,
    analysts: Mapping[str, str],
    participants: Mapping[str, str],
    task_timeout_seconds: float = 600,
) -> dict[str, Table | list[Table]]:
    """coordinator.toml: ``analysts`` and ``participants`` map a name to a token's SHA-256."""
    return {
        "coordinator": {
            "host": host, "port": port, "database_url": database_url,
            "counting_url": counting_url, "counting_token": counting_token,
            "task_timeout_seconds": task_timeout_seconds,
        },
        "analysts": [{"name": n, "token_sha256": h} for n, h in analysts.items()],
        "participants": [{"id": p, "token_sha256": h} for p, h in participants.items()],
    }


def counting_config(
    *,
    host: str,
    port: int,
    database_url: str,
    coordinator_token_sha256: str,
    participants: Mapping[str, str],
    min_participants: int = 3,
) -> dict[str, Table | list[Table]]:
    """counting.toml: ``participants`` maps an id to its token's SHA-256."""
    return {
        "counting": {
            "host": host, "port": port, "database_url": database_url,
            "min_participants": min_participants,
            "coordinator_token_sha256": coordinator_token_sha256,
        },
        "participants": [{"id": p, "token_sha256": h} for p, h in participants.items()],
    }


def participant_config(
    *,
    participant_id: str,
    coordinator_url: str,
    counting_url: str,
    token: str,
    state_dir: str,
    data_path: str,
    columns: Sequence[str] | None = None,
    label_column: str | int | None = None,
    allowed_algorithms: Sequence[str] | None = None,
    min_cluster_size: int = 2,
    enforce_fcm_rule: bool = True,
    max_rounds: int = 1000,
    audit_log: str | None = None,
    protections: Sequence[str] | None = None,
) -> dict[str, Table | list[Table]]:
    """participant.toml; relative paths resolve against the config file's folder.

    ``audit_log``: the participant's audit log (default, when None: ``audit-<id>.jsonl``
    beside the config file). ``protections``: the ``[policy] protections`` the participant
    accepts (None: the policy's default, which refuses "none").
    """
    data: dict[str, Value] = {"path": data_path}
    if columns is not None:
        data["columns"] = list(columns)
    if label_column is not None:
        data["label_column"] = label_column
    participant: dict[str, Value] = {
        "id": participant_id, "coordinator_url": coordinator_url,
        "counting_url": counting_url, "token": token, "state_dir": state_dir,
    }
    if audit_log is not None:
        participant["audit_log"] = audit_log
    policy: dict[str, Value] = {
        "allowed_algorithms": list(
            algorithms.names() if allowed_algorithms is None else allowed_algorithms
        ),
        "min_cluster_size": min_cluster_size,
        "enforce_fcm_rule": enforce_fcm_rule,
        "max_rounds": max_rounds,
    }
    if protections is not None:
        policy["protections"] = sorted(protections)
    return {"participant": participant, "data": data, "policy": policy}


def analyst_config(*, coordinator_url: str, token: str) -> dict[str, Table | list[Table]]:
    """The analyst's client config read by ``fedclust job ... --config``."""
    return {"analyst": {"coordinator_url": coordinator_url, "token": token}}


@dataclass(frozen=True)
class FederationFiles:
    """The files of a federation written by :func:`write_federation`."""

    root: Path
    coordinator: Path
    counting: Path
    analyst: Path
    participants: dict[str, Path]
    coordinator_url: str
    counting_url: str
    analyst_token: str = field(repr=False)


def write_federation(
    root: str | os.PathLike[str],
    *,
    data: Mapping[str, str],
    coordinator_port: int,
    counting_port: int,
    host: str = "127.0.0.1",
    columns: Sequence[str] | None = None,
    label_column: str | int | None = None,
    min_participants: int = 3,
    task_timeout_seconds: float = 600,
    analyst: str = "analyst",
    tls: Literal["none", "tls", "mutual"] = "none",
    protections: Sequence[str] | None = None,
) -> FederationFiles:
    """Write coordinator, counting, analyst and one participant config per ``data`` entry.

    Args:
        root: the folder (created); databases, state folders and the participants' audit
            logs (``audit-<id>.jsonl``) are placed beside the configs.
        data: participant id → its data file path (relative to ``root`` or absolute).
        coordinator_port, counting_port, host: where the two services listen.
        columns: the feature columns every participant reads (all numeric ones if None).
        label_column: every participant's label column (model-based jobs), if any.
        tls: "tls" serves both services over HTTPS with certificates of a fresh CA in
            ``root/pki`` (:mod:`fedclust.pki`); "mutual" also requires every client's
            certificate, a participant's issued under its id.
        protections: every participant's ``[policy] protections`` (None: the default, which
            refuses jobs of protection "none"; a federation whose parties one user plays,
            such as the demo's, opts in to the protection it runs).

    Every credential is fresh; config files holding a token are written 0600.
    """
    root_path = Path(root).resolve()
    root_path.mkdir(parents=True, exist_ok=True)
    scheme = "http" if tls == "none" else "https"
    coordinator_url = f"{scheme}://{host}:{coordinator_port}"
    counting_url = f"{scheme}://{host}:{counting_port}"
    tables = _federation_tls(root_path, tls, host=host, clients=[*data, analyst])
    analyst_cred, coordinator_cred = new_credential(), new_credential()
    part_creds = {pid: new_credential() for pid in data}
    hashes = {pid: c.token_sha256 for pid, c in part_creds.items()}
    coordinator = write_toml(
        root_path / "coordinator.toml",
        coordinator_config(
            host=host, port=coordinator_port,
            database_url=f"sqlite:///{root_path / 'coordinator.db'}",
            counting_url=counting_url, counting_token=coordinator_cred.token,
            analysts={analyst: analyst_cred.token_sha256}, participants=hashes,
            task_timeout_seconds=task_timeout_seconds,
        ) | tables.get("coordinator", {}),
        private=True,
    )
    counting = write_toml(
        root_path / "counting.toml",
        counting_config(
            host=host, port=counting_port,
            database_url=f"sqlite:///{root_path / 'counting.db'}",
            coordinator_token_sha256=coordinator_cred.token_sha256, participants=hashes,
            min_participants=min_participants,
        ) | tables.get("counting", {}),
    )
    client = write_toml(
        root_path / "analyst.toml",
        analyst_config(coordinator_url=coordinator_url, token=analyst_cred.token)
        | tables.get(analyst, {}),
        private=True,
    )
    participants = {
        pid: write_toml(
            root_path / f"participant-{pid}.toml",
            participant_config(
                participant_id=pid, coordinator_url=coordinator_url, counting_url=counting_url,
                token=cred.token, state_dir=f"state-{pid}", data_path=data[pid],
                columns=columns, label_column=label_column, audit_log=f"audit-{pid}.jsonl",
                protections=protections,
            ) | tables.get(pid, {}),
            private=True,
        )
        for pid, cred in part_creds.items()
    }
    return FederationFiles(
        root=root_path, coordinator=coordinator, counting=counting, analyst=client,
        participants=participants, coordinator_url=coordinator_url, counting_url=counting_url,
        analyst_token=analyst_cred.token,
    )


def _federation_tls(
    root: Path, mode: Literal["none", "tls", "mutual"], *, host: str, clients: Sequence[str]
) -> dict[str, dict[str, Table | list[Table]]]:
    """Per config (service or client name): its ``{"tls": ...}`` part; a CA in ``root/pki``."""
    if mode == "none":
        return {}
    from fedclust import pki

    folder = root / "pki"
    pki.init_ca(folder)
    dns, ips = (["localhost"], [host]) if _is_ip(host) else ([host], [])
    for service in ("coordinator", "counting"):
        pki.issue(service, folder, folder, dns=dns, ips=ips)
    ca = {"ca": "pki/ca.pem"}

    def own(name: str) -> dict[str, Value]:
        return {"certificate": f"pki/{name}.pem", "key": f"pki/{name}-key.pem"}

    mutual = {"client_ca": "pki/ca.pem"} if mode == "mutual" else {}
    tables: dict[str, dict[str, Table | list[Table]]] = {
        "coordinator": {"tls": own("coordinator") | ca | mutual},
        "counting": {"tls": own("counting") | mutual},
    }
    for name in clients:
        if mode == "mutual":
            pki.issue(name, folder, folder)
        tables[name] = {"tls": ca | (own(name) if mode == "mutual" else {})}
    return tables


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
