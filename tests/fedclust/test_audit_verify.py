"""``fedclust audit verify`` fails closed: every tampering is caught with the participant's
identity key and the coordinator's receipts, and without them no log — not even an untouched
one — is reported good."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedclust.cli import audit, main
from fedclust.cli.audit import UNVERIFIED_EXIT
from fedclust.crypto.masking import IdentityKey
from fedclust.participant.audit import (
    GENESIS,
    AuditLog,
    AuditReceipt,
    canonical,
    public_key_from,
    verify,
)
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.secure import b64

ME = "hospital-a"
RECEIPT_LINE = 4  # the coordinator holds a receipt for line 4 of the 5


def _record(log: AuditLog, task_id: int) -> None:
    reply = msg.StatisticReply(
        fields={"u_sum": msg.WireArray.of(np.ones(3)),
                "weighted_sum": msg.WireArray.of(np.ones((3, 2)))}
    )
    body = msg.Contribution(job_id="job-1", task_id=task_id, reply=reply)
    log.record(job="job-1", task_id=task_id, recipient="coordinator", what="contribution",
               kind="fcm_sums", body=body.model_dump_json().encode())


def _receipt(key: IdentityKey, log: AuditLog) -> dict[str, Any]:
    """A head as the coordinator hands it out (``GET /api/v1/audit/heads/{participant}``)."""
    seq, digest = log.head()
    return {"participant": ME, "seq": seq, "line_sha256": digest,
            "signature": b64(key.sign_audit("head", seq, digest)),
            "received_at": "2026-01-01T00:00:00+00:00"}


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path, Path, IdentityKey]:
    """(log, identity key file, receipts file, key): five signed lines, a receipt for line 4."""
    key = IdentityKey.generate()
    key_file = tmp_path / "identity.key"
    key_file.write_text(b64(key.private_bytes()) + "\n")
    log = AuditLog(tmp_path / "audit.jsonl", identity=key)
    for task_id in range(RECEIPT_LINE):
        _record(log, task_id)
    receipts = tmp_path / "receipts.json"
    receipts.write_text(json.dumps([_receipt(key, log)]))
    _record(log, RECEIPT_LINE)
    return log.path, key_file, receipts, key


def _hashed(record: dict[str, Any], key: IdentityKey | None) -> dict[str, Any]:
    record.pop("sig", None)
    record.pop("hash", None)
    record["hash"] = hashlib.sha256(canonical(record).encode()).hexdigest()
    if key is not None:
        record["sig"] = b64(key.sign_audit("line", record["hash"]))
    return record


def _rechain(lines: list[str], key: IdentityKey | None, edit: int = 1) -> list[str]:
    """Edit line ``edit + 1`` and recompute every hash and link after it (signing with
    ``key``, or without signatures): what anyone who can write the file can do."""
    records = [json.loads(line) for line in lines]
    records[edit]["task_id"] = 99
    prev, out = GENESIS, []
    for record in records:
        record["prev"] = prev
        line = canonical(_hashed(record, key))
        out.append(line)
        prev = hashlib.sha256(line.encode()).hexdigest()
    return out


def _append(lines: list[str]) -> list[str]:
    last = json.loads(lines[-1])
    record = {**last, "seq": last["seq"] + 1, "task_id": 42,
              "prev": hashlib.sha256(lines[-1].encode()).hexdigest()}
    return [*lines, canonical(_hashed(record, None))]


def _rehash_one(lines: list[str]) -> list[str]:
    record = json.loads(lines[1])
    record["recipient"] = "counting"
    sig = record["sig"]
    out = list(lines)
    out[1] = canonical({**_hashed(record, None), "sig": sig})  # its old signature kept
    return out


def _swap(lines: list[str]) -> list[str]:
    out = list(lines)
    out[1], out[2] = out[2], out[1]
    return out


Tampering = Callable[[list[str], IdentityKey], list[str]]
# name -> (tampering, caught by the chain alone)
TAMPERINGS: dict[str, tuple[Tampering, bool]] = {
    "changed value": (lambda t, k: [t[0], t[1].replace('"task_id":1', '"task_id":7'), *t[2:]],
                      True),
    "changed value, hash recomputed": (lambda t, k: _rehash_one(t), True),
    "deleted line": (lambda t, k: [t[0], *t[2:]], True),
    "reordered lines": (lambda t, k: _swap(t), True),
    "truncated": (lambda t, k: t[:2], False),
    "emptied": (lambda t, k: [], False),
    "re-chained": (lambda t, k: _rechain(t, None), False),
    "appended": (lambda t, k: _append(t), False),
    "re-chained by the key holder": (lambda t, k: _rechain(t, k), False),
}


def _tamper(log: Path, key: IdentityKey, name: str) -> None:
    tampering, _ = TAMPERINGS[name]
    lines = tampering(log.read_text().splitlines(), key)
    log.write_text("".join(line + "\n" for line in lines))


def test_an_untouched_log_with_its_key_and_receipts_is_verified(
    signed: tuple[Path, Path, Path, IdentityKey], capsys: pytest.CaptureFixture[str]
) -> None:
    log, key_file, receipts, _ = signed
    assert main(["audit", "verify", str(log), "--public-key", str(key_file),
                 "--receipts", str(receipts)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verified: 5 records, chain intact, 5 signed by the given key")
    assert "every receipt matches (the last names line 4;" in out


@pytest.mark.parametrize("name", list(TAMPERINGS))
def test_every_tampering_is_caught_with_the_key_material(
    signed: tuple[Path, Path, Path, IdentityKey], name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log, key_file, receipts, key = signed
    _tamper(log, key, name)
    assert main(["audit", "verify", str(log), "--public-key", str(key_file),
                 "--receipts", str(receipts)]) == 1
    err = capsys.readouterr().err
    assert f"{log}: line " in err and "the chain is broken there" in err


@pytest.mark.parametrize("name", [None, *TAMPERINGS])
@pytest.mark.parametrize("given", ["nothing", "key only", "receipts only"])
def test_without_the_key_material_no_log_is_reported_good(
    signed: tuple[Path, Path, Path, IdentityKey], name: str | None, given: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log, key_file, receipts, key = signed
    if name is not None:
        _tamper(log, key, name)
    flags = {"nothing": [], "key only": ["--public-key", str(key_file)],
             "receipts only": ["--receipts", str(receipts)]}[given]
    status = main(["audit", "verify", str(log), *flags])
    captured = capsys.readouterr()
    assert status != 0 and captured.out == ""
    if name is None or (given == "nothing" and not TAMPERINGS[name][1]):
        assert status == UNVERIFIED_EXIT
        (line,) = captured.err.splitlines()  # one line, naming what is missing
        assert line.startswith(f"{log}: UNVERIFIED: ") and "chain intact" in line
        missing = {"nothing": ("--public-key", "--receipts"), "key only": ("--receipts",),
                   "receipts only": ("--public-key",)}[given]
        assert all(f"no {flag}" in line for flag in missing)
        assert "--config participant.toml" in line


def test_a_receipts_file_naming_no_line_leaves_the_log_unverified(
    signed: tuple[Path, Path, Path, IdentityKey], capsys: pytest.CaptureFixture[str]
) -> None:
    log, key_file, receipts, _ = signed
    receipts.write_text("[]")
    assert main(["audit", "verify", str(log), "--public-key", str(key_file),
                 "--receipts", str(receipts)]) == UNVERIFIED_EXIT
    assert "no --receipts naming a line" in capsys.readouterr().err


@pytest.mark.parametrize("seq", [0, -3])
def test_a_receipt_naming_no_line_is_an_input_error_not_an_anchor(
    signed: tuple[Path, Path, Path, IdentityKey], tmp_path: Path, seq: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A log rewritten under a swapped key, with a "receipt" for line 0 (never compared with
    any line), was reported verified."""
    log, key_file, receipts, _ = signed
    other = IdentityKey.generate()
    log.write_text("".join(line + "\n" for line in _rechain(log.read_text().splitlines(), other)))
    key_file.write_text(b64(other.private_bytes()) + "\n")
    receipts.write_text(json.dumps([{"seq": seq, "line_sha256": GENESIS}]))
    assert main(["audit", "verify", str(log), "--public-key", str(key_file),
                 "--receipts", str(receipts)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "a receipt names no line of the log" in captured.err


def test_verify_counts_only_receipts_compared_with_a_line(
    signed: tuple[Path, Path, Path, IdentityKey],
) -> None:
    log, key_file, _, _ = signed
    report = verify(log, public_key=public_key_from(str(key_file)),
                    receipts=[AuditReceipt(seq=0, line_sha256=GENESIS)])
    assert report.ok and not report.verified and report.missing == ("receipts",)


def test_a_nan_in_a_line_is_a_broken_line(
    signed: tuple[Path, Path, Path, IdentityKey], capsys: pytest.CaptureFixture[str]
) -> None:
    log, key_file, receipts, _ = signed
    lines = log.read_text().splitlines()
    assert '"task_id":1,' in lines[1]
    lines[1] = lines[1].replace('"task_id":1,', '"task_id":NaN,')
    log.write_text("".join(line + "\n" for line in lines))
    assert main(["audit", "verify", str(log), "--public-key", str(key_file),
                 "--receipts", str(receipts)]) == 1
    err = capsys.readouterr().err
    assert f"{log}: line 2 holds a number JSON does not allow" in err


def _config(tmp_path: Path, log: Path, key_file: Path) -> Path:
    config = tmp_path / "participant.toml"
    config.write_text(
        f'[participant]\nid = "{ME}"\ncoordinator_url = "http://coordinator.invalid"\n'
        f'counting_url = "http://counting.invalid"\ntoken = "a-token-of-hospital-a"\n'
        f'audit_log = "{log.name}"\nidentity_key = "{key_file.name}"\n'
        '[data]\npath = "rows.csv"\ncolumns = ["x"]\n'
    )
    return config


def test_config_finds_the_log_the_key_and_the_coordinators_receipts(
    signed: tuple[Path, Path, Path, IdentityKey], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    log, key_file, receipts, _ = signed
    served = json.loads(receipts.read_text())
    asked: list[str] = []

    def fetch(config: Any) -> list[dict[str, Any]]:
        asked.append(config.id)
        return list(served)

    monkeypatch.setattr(audit, "_fetch_receipts", fetch)
    config = _config(tmp_path, log, key_file)
    assert main(["audit", "verify", "--config", str(config)]) == 0
    assert asked == [ME] and capsys.readouterr().out.startswith("verified: 5 records")
    # a log rewritten with a new key, and the agent's key file swapped for it: the lines the
    # receipts name carried signatures by the enrolled key, so the swap does not pass
    other = IdentityKey.generate()
    log.write_text("".join(line + "\n" for line in _rechain(log.read_text().splitlines(), other)))
    key_file.write_text(b64(other.private_bytes()) + "\n")
    assert main(["audit", "verify", "--config", str(config)]) == 1
    assert "line 4 differs from the line the coordinator gave a receipt for" in (
        capsys.readouterr().err
    )


def test_verify_needs_a_log_or_a_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "verify"]) == 2
    assert "give the audit log (LOG) or the participant's --config" in capsys.readouterr().err
