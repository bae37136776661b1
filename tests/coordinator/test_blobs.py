"""Large values by content hash (protocol.wire.blobs): moved out bottom-up, put back exactly."""

from __future__ import annotations

import pytest

from fedclust.protocol.wire.blobs import BLOB_KEY, BLOB_MIN_CHARS, externalise, inline, references


def test_large_values_become_one_blob_each_and_come_back_exactly() -> None:
    keys = [f"key-{i:04d}-" + "k" * 40 for i in range(200)]  # small strings, a large list
    long = "A" * BLOB_MIN_CHARS
    doc = {"kind": "x", "roster": keys, "a": {"data": long}, "b": {"data": long}, "n": 3}
    blobs: dict[str, bytes] = {}
    out = externalise(doc, blobs)
    assert out["kind"] == "x" and out["n"] == 3
    assert set(out["roster"]) == {BLOB_KEY} and out["a"] == out["b"]  # the same value, once
    assert len(blobs) == 2 and references(out) == set(blobs)
    assert inline(out, blobs.__getitem__) == doc


def test_a_small_document_is_unchanged_and_a_wrong_blob_is_refused() -> None:
    blobs: dict[str, bytes] = {}
    assert externalise({"centers": [1.5, 2.5], "name": "p"}, blobs) == {
        "centers": [1.5, 2.5], "name": "p"
    }
    assert blobs == {}
    out = externalise({"data": "B" * BLOB_MIN_CHARS}, blobs)
    with pytest.raises(ValueError, match="does not hash to its name"):
        inline(out, lambda _: b'"tampered"')


def test_the_document_itself_is_never_a_blob() -> None:
    # Fields each just below the limit add up to a large document: the fields stay inline
    # (none alone is large) and the document keeps its keys (the broker reads its "spec").
    part = "C" * (BLOB_MIN_CHARS - 100)
    doc = {"job_id": "j", "spec": {"a": part, "b": part[:50]}}
    blobs: dict[str, bytes] = {}
    out = externalise(doc, blobs)
    assert set(out) == {"job_id", "spec"} and out["spec"] == doc["spec"] and blobs == {}
    big = {"job_id": "j", "spec": {"a": part, "b": part}}  # the spec itself is large
    out = externalise(big, blobs)
    assert set(out) == {"job_id", "spec"} and set(out["spec"]) == {BLOB_KEY}
    assert inline(out, blobs.__getitem__) == big
