"""The participant's audit log: an append-only, hash-chained record of everything it sends.

:class:`AuditLog` writes one canonical JSON line (keys sorted, no spaces, ASCII) per request
body, flushed and fsynced before the body is sent: ``seq``, ``prev`` (SHA-256 of the previous
line, :data:`GENESIS` first), ``hash`` (of this record without ``hash``), ``sig`` (Ed25519 over
``hash``), ``sha256`` of the exact bytes sent, and the recipient, job, kind and fields' names,
shapes and protection — never a value. :func:`verify` reports the first broken line and is
fail-closed: :attr:`VerifyReport.verified` only when both the signatures (``public_key``) and
the coordinator's receipts of the log's head (``receipts``) were checked. :func:`show`
summarises what was revealed, to whom, in what form.

Design notes: ``docs/participant.md`` (§ The audit log: format, anchors, what it does not
prove).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from fedclust.crypto.masking import IdentityKey, audit_signature_valid
from fedclust.infra.private_files import create_private
from fedclust.protocol.wire.messages import field_protection, wire_fields

__all__ = [
    "GENESIS",
    "Anchor",
    "AuditError",
    "AuditLog",
    "AuditReceipt",
    "AuditSummary",
    "FieldSummary",
    "KindSummary",
    "VerifyReport",
    "canonical",
    "describe_body",
    "format_summary",
    "load_receipts",
    "parse_receipts",
    "public_key_from",
    "show",
    "verify",
]

#: ``prev`` of the first record.
GENESIS: Final = "0" * 64
Recipient = Literal["coordinator", "counting"]
_KEYS: Final = frozenset(
    {"seq", "time", "job", "task_id", "recipient", "what", "kind", "fields", "sha256",
     "prev", "hash"}
)
_SIGNED_KEYS: Final = _KEYS | {"sig"}


class AuditError(ValueError):
    """The audit log cannot be continued: its last line is damaged or not a record."""


def canonical(record: dict[str, Any]) -> str:
    """The canonical JSON text of a record: sorted keys, no spaces, ASCII only."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def _sha256(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def describe_body(body: bytes, kind: str = "") -> list[dict[str, Any]]:
    """The fields of a JSON request body of message ``kind``: name, shape (None for a
    scalar), protection (``protocol.wire.messages.field_protection``)."""
    return [
        {
            "name": name,
            "shape": None if shape is None else list(shape),
            "protection": field_protection(name, kind),
        }
        for name, shape in wire_fields(json.loads(body))
    ]


@dataclass(frozen=True)
class AuditReceipt:
    """The coordinator's record that line ``seq`` of a log had text hashing to
    ``line_sha256`` when it arrived at ``received_at``."""

    seq: int
    line_sha256: str
    received_at: str = ""


class AuditLog:
    """An open audit log; :meth:`record` appends one line (thread-safe), signed by
    ``identity`` when given."""

    def __init__(
        self, path: str | os.PathLike[str], *, identity: IdentityKey | None = None
    ) -> None:
        self.path = Path(path)
        self._identity = identity
        self._lock = threading.Lock()
        self._seq = 0
        self._prev = GENESIS
        if self.path.exists():
            last = _last_line(self.path)
            if last is not None:
                number, text = last
                problem = _check_record(text, seq=number, prev=None)
                if problem is not None:
                    raise AuditError(
                        f"audit log {self.path}: line {number} {problem}; run "
                        f"`fedclust audit verify {self.path}` and keep the damaged log aside"
                    )
                self._seq, self._prev = number, _sha256(text)
        else:
            create_private(self.path)  # 0600, missing folders 0700, whatever the umask

    def record(
        self,
        *,
        job: str | None,
        task_id: int | None,
        recipient: Recipient,
        what: str,
        kind: str,
        body: bytes,
    ) -> dict[str, Any]:
        """Append the record of sending ``body`` (the exact bytes); returns the record."""
        fields = describe_body(body, kind)
        with self._lock:
            record: dict[str, Any] = {
                "seq": self._seq + 1,
                "time": datetime.now(UTC).isoformat(timespec="microseconds"),
                "job": job,
                "task_id": task_id,
                "recipient": recipient,
                "what": what,
                "kind": kind,
                "fields": fields,
                "sha256": _sha256(body),
                "prev": self._prev,
            }
            record["hash"] = _sha256(canonical(record))
            if self._identity is not None:
                record["sig"] = base64.b64encode(
                    self._identity.sign_audit("line", record["hash"])
                ).decode("ascii")
            line = canonical(record)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                data = (line + "\n").encode("ascii")
                written = 0
                while written < len(data):
                    written += os.write(fd, data[written:])
                os.fsync(fd)
            finally:
                os.close(fd)
            self._seq, self._prev = record["seq"], _sha256(line)
            return record

    def head(self) -> tuple[int, str]:
        """(number of the last line, SHA-256 of its text); (0, GENESIS) for an empty log."""
        with self._lock:
            return self._seq, self._prev


def _last_line(path: Path) -> tuple[int, str] | None:
    """(line number, text) of the last line, or None for an empty file."""
    number, last = 0, None
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):  # noqa: B007 - the count is the result
            last = raw
    if last is None:
        return None
    if not last.endswith(b"\n"):
        raise AuditError(f"audit log {path}: line {number} is incomplete (no line end)")
    return number, last[:-1].decode("utf-8", errors="replace")


def _check_record(text: str, *, seq: int, prev: str | None) -> str | None:
    """Why line ``seq`` is not a valid record (None when it is); ``prev``: expected link."""
    try:
        record = json.loads(text)
    except ValueError:
        return "is not JSON"
    if not isinstance(record, dict) or set(record) not in (_KEYS, _SIGNED_KEYS):
        return "is not an audit record (wrong keys)"
    try:
        form = canonical(record)
    except ValueError:  # NaN or Infinity: JSON has no such number, no line is written with one
        return "holds a number JSON does not allow (NaN or Infinity; edited by hand?)"
    if form != text:
        return "is not in canonical form (edited by hand?)"
    if record["seq"] != seq:
        return f"has seq {record['seq']!r}, expected {seq} (a line deleted or moved?)"
    body = {k: v for k, v in record.items() if k not in ("hash", "sig")}
    if record["hash"] != _sha256(canonical(body)):
        return "does not match its hash (its content was changed)"
    if prev is not None and record["prev"] != prev:
        return "does not link to the line before it (a line deleted, inserted or moved?)"
    return None


#: The anchors :func:`verify` needs to vouch for a log: the participant's identity public key
#: (catches a re-chained or appended log) and the coordinator's receipts (a truncated or
#: emptied one).
Anchor = Literal["public_key", "receipts"]


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of :func:`verify`: the number of records read, the first broken line
    (1-based) with the reason, how many lines carry a signature, the anchors that were not
    checked (``missing``) and the last line a receipt names.

    ``ok``: no line is broken. ``verified``: ok with both anchors checked — every line signed
    by the given key and at least one receipt naming a line compared with it, all matching.
    An intact chain alone proves nothing against whoever can write the file, so a log that
    is ok but not verified is *unverified*, not good.
    """

    records: int
    broken_line: int | None = None
    reason: str | None = None
    signed: int = 0
    missing: tuple[Anchor, ...] = ()
    last_receipt: int = 0

    @property
    def ok(self) -> bool:
        return self.broken_line is None

    @property
    def verified(self) -> bool:
        return self.ok and not self.missing


def _signature_problem(record: dict[str, Any], public_key: bytes) -> str | None:
    if "sig" not in record:
        return "is not signed (a line written without the identity key?)"
    try:
        signature = base64.b64decode(record["sig"], validate=True)
    except (binascii.Error, TypeError):
        return "has a signature that is not base64"
    if not audit_signature_valid(public_key, signature, "line", record["hash"]):
        return "is not signed by the given identity key (rewritten?)"
    return None


def verify(
    path: str | os.PathLike[str],
    *,
    public_key: bytes | None = None,
    receipts: Sequence[AuditReceipt] = (),
) -> VerifyReport:
    """Check every line of the log and the chain between them; with ``public_key``, every
    line's signature; with ``receipts``, that each line a receipt names is there unchanged.
    A missing key, or no receipt naming a line (``seq`` >= 1), is reported in ``missing``
    (the log is then unverified): a verified log had every such receipt compared with it.

    Raises:
        FileNotFoundError: there is no file at ``path``.
    """
    wanted: dict[int, list[AuditReceipt]] = {}
    for receipt in receipts:
        if receipt.seq >= 1:  # a receipt naming no line is never compared: it anchors nothing
            wanted.setdefault(receipt.seq, []).append(receipt)
    missing: tuple[Anchor, ...] = (
        *(("public_key",) if public_key is None else ()), *(() if wanted else ("receipts",))
    )
    report = functools.partial(VerifyReport, missing=missing, last_receipt=max(wanted, default=0))
    prev, count, signed = GENESIS, 0, 0
    with Path(path).open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                return report(count, number, "is incomplete (no line end)", signed)
            try:
                text = raw[:-1].decode("ascii")
            except UnicodeDecodeError:
                return report(count, number, "is not ASCII JSON", signed)
            problem = _check_record(text, seq=number, prev=prev)
            record = json.loads(text) if problem is None else {}
            if problem is None and public_key is not None:
                problem = _signature_problem(record, public_key)
            digest = _sha256(text)
            if problem is None and any(r.line_sha256 != digest for r in wanted.get(number, ())):
                problem = "differs from the line the coordinator gave a receipt for (rewritten?)"
            if problem is not None:
                return report(count, number, problem, signed)
            signed += "sig" in record
            prev, count = digest, number
    if wanted and max(wanted) > count:
        return report(
            count, count + 1,
            f"is missing: the log ends at line {count} but the coordinator holds a receipt for "
            f"line {max(wanted)} (truncated?)",
            signed,
        )
    return report(count, signed=signed)


def load_receipts(path: str | os.PathLike[str]) -> list[AuditReceipt]:
    """Receipts from a JSON file (a list of ``{"seq", "line_sha256", ...}`` objects, as
    ``fedclust audit receipts`` prints them).

    Raises:
        ValueError: the file is not such a list; the message names the file.
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{path}: not a list of audit receipts ({type(exc).__name__}); expected the JSON "
            "list `fedclust audit receipts` prints"
        ) from None
    return parse_receipts(doc, str(path))


def parse_receipts(doc: Any, source: str) -> list[AuditReceipt]:
    """Receipts from a decoded JSON list of ``{"seq", "line_sha256", ...}`` objects (the
    coordinator's ``GET /api/v1/audit/heads/{participant}``).

    Raises:
        ValueError: ``doc`` is not such a list, or a receipt names no line (``seq`` < 1);
            the message names ``source``.
    """
    try:
        receipts = [
            AuditReceipt(
                seq=int(r["seq"]), line_sha256=str(r["line_sha256"]),
                received_at=str(r.get("received_at", "")),
            )
            for r in doc
        ]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(
            f"{source}: not a list of audit receipts ({type(exc).__name__}); expected the "
            "JSON list `fedclust audit receipts` prints"
        ) from None
    if any(r.seq < 1 for r in receipts):
        raise ValueError(
            f"{source}: a receipt names no line of the log (its seq is below 1); lines are "
            "numbered from 1"
        )
    return receipts


def public_key_from(value: str) -> bytes:
    """An Ed25519 public key from base64 (32 bytes) or from an identity key file.

    Raises:
        ValueError: neither; the message says what was expected.
    """
    file = Path(value)
    if file.is_file():
        try:
            private = base64.b64decode(file.read_text(encoding="ascii").strip(), validate=True)
            return IdentityKey.from_private_bytes(private).public_bytes()
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise ValueError(f"{value}: not an identity key file (base64 of 32 bytes)") from None
    try:
        public = base64.b64decode(value, validate=True)
    except binascii.Error:
        public = b""
    if len(public) != 32:
        raise ValueError(
            f"--public-key {value!r} is neither an identity key file nor a base64 Ed25519 "
            "public key (32 bytes)"
        )
    return public


def _records(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("r", encoding="ascii") as fh:
        for line in fh:
            if line.strip():
                record: dict[str, Any] = json.loads(line)
                yield record


# -- show --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FieldSummary:
    """One field: its name, the distinct shapes sent (None for a scalar), protection."""

    name: str
    shapes: tuple[tuple[int, ...], ...] | None
    protection: str


@dataclass(frozen=True)
class KindSummary:
    """One kind of message to one recipient in one job."""

    what: str
    kind: str
    messages: int
    fields: tuple[FieldSummary, ...]


@dataclass(frozen=True)
class AuditSummary:
    """Per job (None: not tied to a job, such as the enrolment), per recipient, per kind."""

    jobs: dict[str | None, dict[str, tuple[KindSummary, ...]]]
    records: int

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "jobs": [
                {
                    "job": job,
                    "recipients": {
                        recipient: [
                            {
                                "what": k.what, "kind": k.kind, "messages": k.messages,
                                "fields": [
                                    {"name": f.name, "protection": f.protection,
                                     "shapes": None if f.shapes is None
                                     else [list(s) for s in f.shapes]}
                                    for f in k.fields
                                ],
                            }
                            for k in kinds
                        ]
                        for recipient, kinds in recipients.items()
                    },
                }
                for job, recipients in self.jobs.items()
            ],
        }


def show(path: str | os.PathLike[str], job: str | None = None) -> AuditSummary:
    """Summarise the log (only ``job`` when given): what was revealed, to whom, in what form.

    The log is not verified here; run :func:`verify` for that.
    """
    groups: dict[str | None, dict[str, dict[tuple[str, str], list[dict[str, Any]]]]] = {}
    total = 0
    for record in _records(Path(path)):
        if job is not None and record["job"] != job:
            continue
        total += 1
        by_recipient = groups.setdefault(record["job"], {})
        by_kind = by_recipient.setdefault(record["recipient"], {})
        by_kind.setdefault((record["what"], record["kind"]), []).append(record)
    jobs: dict[str | None, dict[str, tuple[KindSummary, ...]]] = {}
    for job_id, recipients in groups.items():
        jobs[job_id] = {
            recipient: tuple(
                _kind_summary(what, kind, records)
                for (what, kind), records in sorted(kinds.items())
            )
            for recipient, kinds in sorted(recipients.items())
        }
    return AuditSummary(jobs=jobs, records=total)


def _kind_summary(what: str, kind: str, records: list[dict[str, Any]]) -> KindSummary:
    shapes: dict[str, set[tuple[int, ...]] | None] = {}
    protection: dict[str, set[str]] = {}
    for record in records:
        for f in record["fields"]:
            name = f["name"]
            protection.setdefault(name, set()).add(f["protection"])
            if f["shape"] is None:
                shapes.setdefault(name, None)
            else:
                seen = shapes.setdefault(name, set())
                if seen is None:
                    seen = shapes[name] = set()
                seen.add(tuple(f["shape"]))
    fields = tuple(
        FieldSummary(
            name=name,
            shapes=None if seen is None else tuple(sorted(seen)),
            protection="/".join(sorted(protection[name])),
        )
        for name, seen in sorted(shapes.items())
    )
    return KindSummary(what=what, kind=kind, messages=len(records), fields=fields)


def format_summary(summary: AuditSummary) -> str:
    """The summary as indented text for a person."""
    lines = [f"{summary.records} records"]
    for job, recipients in summary.jobs.items():
        lines.append(f"job {job}" if job is not None else "not tied to a job")
        for recipient, kinds in recipients.items():
            lines.append(f"  to the {recipient}:")
            for k in kinds:
                label = k.what if k.kind == k.what else f"{k.what} ({k.kind})"
                lines.append(f"    {label}: {k.messages} message(s)")
                for f in k.fields:
                    form = (
                        "scalar" if f.shapes is None
                        else ", ".join("×".join(map(str, s)) or "()" for s in f.shapes)
                    )
                    lines.append(f"      {f.name}  [{form}]  {f.protection}")
    return "\n".join(lines)
