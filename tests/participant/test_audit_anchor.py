"""An audit log a rewrite cannot fool: signed lines, and receipts held by the coordinator.

A chain alone is fooled by truncation, emptying, or an edit re-chained; the signature catches
a rewrite by anyone without the identity key, the receipts catch a truncated, emptied or
rewritten log even by whoever holds the key.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from fedclust.crypto.masking import IdentityKey
from fedclust.participant.audit import (
    GENESIS,
    AuditLog,
    AuditReceipt,
    canonical,
    load_receipts,
    public_key_from,
    verify,
)
from fedclust.protocol.wire.secure import b64
from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    FakeCounting,
    auth,
    enrol,
    running_app,
    token,
)

BODY = b'{"reply":{"kind":"ack"}}'


def write(path: Path, identity: IdentityKey | None, lines: int = 4) -> AuditLog:
    log = AuditLog(path, identity=identity)
    for i in range(lines):
        log.record(job="job-1", task_id=i, recipient="coordinator", what="contribution",
                   kind="ack", body=BODY)
    return log


def rechain(path: Path, edit_line: int, identity: IdentityKey | None) -> None:
    """Edit one line's task id and recompute every hash after it (signing with ``identity``,
    or dropping the signatures) — what someone who can write the file can do."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[edit_line - 1]["task_id"] = 99
    prev = GENESIS
    out = []
    for record in records:
        record.pop("sig", None)
        record["prev"] = prev
        record["hash"] = hashlib.sha256(
            canonical({k: v for k, v in record.items() if k != "hash"}).encode()
        ).hexdigest()
        if identity is not None:
            record["sig"] = base64.b64encode(identity.sign_audit("line", record["hash"])).decode()
        line = canonical(record)
        out.append(line)
        prev = hashlib.sha256(line.encode()).hexdigest()
    path.write_text("".join(line + "\n" for line in out))


def receipt_of(log: AuditLog) -> AuditReceipt:
    seq, digest = log.head()
    return AuditReceipt(seq=seq, line_sha256=digest)


def test_a_signed_log_verifies_with_its_key_and_counts_the_signatures(tmp_path: Path) -> None:
    key = IdentityKey.generate()
    log = write(tmp_path / "a.jsonl", key)
    report = verify(log.path, public_key=key.public_bytes(), receipts=[receipt_of(log)])
    assert report.ok and report.records == 4 and report.signed == 4


def test_a_rechained_edit_passes_the_chain_but_not_the_signature(tmp_path: Path) -> None:
    key = IdentityKey.generate()
    path = tmp_path / "a.jsonl"
    write(path, key)
    rechain(path, 2, identity=None)
    assert verify(path).ok  # the chain alone is fooled
    report = verify(path, public_key=key.public_bytes())
    assert report.broken_line == 1 and "not signed" in (report.reason or "")


def test_a_log_resigned_with_another_key_fails(tmp_path: Path) -> None:
    key, other = IdentityKey.generate(), IdentityKey.generate()
    path = tmp_path / "a.jsonl"
    write(path, key)
    rechain(path, 3, identity=other)
    report = verify(path, public_key=key.public_bytes())
    assert report.broken_line == 1 and "not signed by the given identity key" in (
        report.reason or ""
    )


def test_receipts_catch_a_rewrite_by_the_key_holder(tmp_path: Path) -> None:
    key = IdentityKey.generate()
    path = tmp_path / "a.jsonl"
    receipt = receipt_of(write(path, key))
    rechain(path, 2, identity=key)  # signed again with the right key: only a receipt helps
    assert verify(path, public_key=key.public_bytes()).ok
    report = verify(path, public_key=key.public_bytes(), receipts=[receipt])
    assert report.broken_line == 4
    assert "differs from the line the coordinator gave a receipt for" in (report.reason or "")


@pytest.mark.parametrize("keep", [2, 0], ids=["truncated", "emptied"])
def test_receipts_catch_a_truncated_or_emptied_log(tmp_path: Path, keep: int) -> None:
    key = IdentityKey.generate()
    path = tmp_path / "a.jsonl"
    receipt = receipt_of(write(path, key))
    kept = path.read_text().splitlines()[:keep]
    path.write_text("".join(line + "\n" for line in kept))
    assert verify(path, public_key=key.public_bytes()).ok  # signatures alone are fooled
    report = verify(path, receipts=[receipt])
    assert not report.ok and report.records == keep
    assert f"the log ends at line {keep} but the coordinator holds a receipt for line 4" in (
        report.reason or ""
    )


def test_an_unsigned_log_still_verifies_as_a_chain(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    write(path, None)
    assert verify(path).ok and verify(path).signed == 0
    assert "is not signed" in (verify(path, public_key=IdentityKey.generate().public_bytes())
                               .reason or "")


def test_keys_and_receipts_files_are_read_with_clear_errors(tmp_path: Path) -> None:
    key = IdentityKey.generate()
    key_file = tmp_path / "identity.key"
    key_file.write_text(b64(key.private_bytes()) + "\n")
    assert public_key_from(str(key_file)) == key.public_bytes()
    assert public_key_from(b64(key.public_bytes())) == key.public_bytes()
    with pytest.raises(ValueError, match="neither an identity key file nor a base64"):
        public_key_from("not-a-key")
    bad = tmp_path / "receipts.json"
    bad.write_text('{"seq": 1}')
    with pytest.raises(ValueError, match=r"receipts\.json: not a list of audit receipts"):
        load_receipts(bad)


def _head(key: IdentityKey, seq: int, digest: str) -> dict[str, object]:
    return {"seq": seq, "line_sha256": digest,
            "signature": b64(key.sign_audit("head", seq, digest))}


def test_the_coordinator_keeps_signed_heads_and_refuses_others(tmp_path: Path) -> None:
    me, other = NAMES[0], NAMES[1]
    key = IdentityKey.generate()
    digest = "ab" * 32
    with running_app(tmp_path, FakeCounting()) as client:
        mine = auth(token(me))
        unenrolled = client.post(f"{API}/audit/heads", json=_head(key, 3, digest), headers=mine)
        assert unenrolled.status_code == 409
        enrol(client, me, identity_key=b64(key.public_bytes()))
        first = client.post(f"{API}/audit/heads", json=_head(key, 3, digest), headers=mine)
        assert first.status_code == 200, first.text
        assert first.json()["seq"] == 3 and first.json()["participant"] == me
        again = client.post(f"{API}/audit/heads", json=_head(key, 3, digest), headers=mine)
        assert again.json()["received_at"] == first.json()["received_at"]
        forged = _head(IdentityKey.generate(), 5, digest)
        assert client.post(f"{API}/audit/heads", json=forged, headers=mine).status_code == 422
        behind = client.post(f"{API}/audit/heads", json=_head(key, 2, digest), headers=mine)
        assert behind.status_code == 409 and "behind line 3" in behind.json()["detail"]
        changed = client.post(f"{API}/audit/heads", json=_head(key, 3, "cd" * 32), headers=mine)
        assert changed.status_code == 409
        assert client.post(f"{API}/audit/heads", json=_head(key, 3, digest),
                           headers=ANALYST).status_code == 403
        listed = client.get(f"{API}/audit/heads/{me}", headers=ANALYST)
        assert [(r["seq"], r["line_sha256"]) for r in listed.json()] == [(3, digest)]
        assert client.get(f"{API}/audit/heads/{me}", headers=mine).status_code == 200
        foreign = client.get(f"{API}/audit/heads/{me}", headers=auth(token(other)))
        assert foreign.status_code == 403
