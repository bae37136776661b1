"""Large payloads by content hash: a JSON document's large values moved out into blobs.

The coordinator stores a task's large values (FedCRef's models, fed-distill's public set:
base64 array data; a cohort's list of public keys) once, keyed by the SHA-256 of their
compact JSON text, and can serve a task with each such value replaced by the reference
``{"$blob": "<sha256 hex>"}``; a participant fetches every blob it has not cached once
(``GET /api/v1/blobs/{sha256}``) and puts the values back before it validates the task.
Values are moved out bottom-up (a list of small strings can become one blob; a dict keeps
its small fields and refers to its large ones). Task and reply models never have a
``$blob`` field, so a reference cannot be mistaken for data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Final

__all__ = ["BLOB_KEY", "BLOB_MIN_CHARS", "digest", "externalise", "inline", "references"]

#: The key of a reference object.
BLOB_KEY: Final = "$blob"
#: Values whose compact JSON has at least this many characters become blobs (smaller ones
#: are cheaper to repeat).
BLOB_MIN_CHARS: Final = 4096


def digest(data: bytes) -> str:
    """The SHA-256 hex digest that names ``data``."""
    return hashlib.sha256(data).hexdigest()


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def externalise(doc: Any, blobs: dict[str, bytes], *, root: bool = True) -> Any:
    """``doc`` with every value whose compact JSON has at least :data:`BLOB_MIN_CHARS`
    characters (after its own large parts moved out) replaced by a reference; the JSON
    texts (UTF-8) are added to ``blobs`` by digest. The document itself (``root``) is never
    replaced, however large its remaining fields make it."""
    if isinstance(doc, dict):
        doc = {key: externalise(value, blobs, root=False) for key, value in doc.items()}
    elif isinstance(doc, list):
        doc = [externalise(value, blobs, root=False) for value in doc]
    elif not isinstance(doc, str):
        return doc  # numbers, booleans, null: always small
    text = _json(doc)
    if root or len(text) < BLOB_MIN_CHARS:
        return doc
    data = text.encode("utf-8")
    name = digest(data)
    blobs[name] = data
    return {BLOB_KEY: name}


def _reference(doc: dict[str, Any]) -> str | None:
    name = doc.get(BLOB_KEY)
    return name if len(doc) == 1 and isinstance(name, str) else None


def references(doc: Any) -> set[str]:
    """The digests that ``doc`` refers to."""
    if isinstance(doc, dict):
        name = _reference(doc)
        if name is not None:
            return {name}
        return set().union(*(references(value) for value in doc.values()))
    if isinstance(doc, list):
        return set().union(*(references(value) for value in doc))
    return set()


def inline(doc: Any, fetch: Callable[[str], bytes]) -> Any:
    """``doc`` with every reference replaced by its value; ``fetch(digest)`` gives the JSON
    bytes, which must hash to the digest (else :class:`ValueError`)."""
    if isinstance(doc, dict):
        name = _reference(doc)
        if name is None:
            return {key: inline(value, fetch) for key, value in doc.items()}
        data = fetch(name)
        if digest(data) != name:
            raise ValueError(f"blob {name} does not hash to its name")
        return inline(json.loads(data), fetch)
    if isinstance(doc, list):
        return [inline(value, fetch) for value in doc]
    return doc
