"""The pydantic models the wire format and the registry's parameters models share: the
strict base and :class:`WireArray`, the exact encoding of a numpy array; :class:`Flag`,
a field's command-line spelling; and the string types :data:`Identifier` and
:data:`Sha256Hex` (their rules in :mod:`core.validation`). They sit below the
registry (``protocol.algorithms``), whose parameters models (fed-distill's public set) hold
arrays, and ``protocol.wire.messages`` re-exports them as part of the wire format.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedclust.core.validation import IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN, SHA256_HEX_PATTERN

MAX_ARRAY_ELEMENTS: Final = 10_000_000
_DTYPES: Final[dict[str, np.dtype[Any]]] = {
    "float64": np.dtype("<f8"), "float32": np.dtype("<f4"), "int64": np.dtype("<i8"),
    "uint64": np.dtype("<u8"),
}
#: A participant, job, organisation or certificate name (:func:`core.validation.is_identifier`).
Identifier = Annotated[
    str, Field(min_length=1, max_length=IDENTIFIER_MAX_LENGTH, pattern=IDENTIFIER_PATTERN)
]
#: A SHA-256 digest (:data:`core.validation.SHA256_HEX_PATTERN`).
Sha256Hex = Annotated[str, Field(min_length=64, max_length=64, pattern=SHA256_HEX_PATTERN)]


@dataclass(frozen=True)
class Flag:
    """How the command line spells a parameters model's field, declared on it
    (``Annotated[int, Flag("--distill-epochs")]``; pydantic keeps it in the field's
    ``metadata`` and leaves it out of the JSON schema): ``name`` (default ``--field-name``),
    ``aliases`` that also give it (another algorithm's field may share one) and ``metavar``
    (of a list field: one item, ``H`` for ``H,H,...``)."""

    name: str | None = None
    aliases: tuple[str, ...] = ()
    metavar: str | None = None


class Strict(BaseModel):
    """Strict, frozen, and every float finite (NaN and ±Infinity answer 422)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class WireArray(Strict):
    """A numpy array, exact: dtype, shape and base64 of its little-endian C-order bytes."""

    dtype: Literal["float64", "float32", "int64", "uint64"]
    shape: tuple[Annotated[int, Field(ge=0, le=MAX_ARRAY_ELEMENTS)], ...] = Field(max_length=4)
    data: str

    @model_validator(mode="after")
    def _consistent(self) -> WireArray:
        n = math.prod(self.shape)  # exact Python integers: no wrap-around
        if n > MAX_ARRAY_ELEMENTS:
            raise ValueError(f"array has {n} elements; at most {MAX_ARRAY_ELEMENTS} are accepted")
        arr = self._decode()
        if arr.size != n:
            raise ValueError(
                f"array data holds {arr.size} values but shape {self.shape} needs {n}"
            )
        if self.dtype.startswith("float") and not np.isfinite(arr).all():
            raise ValueError("array contains NaN or infinity")
        return self

    def _decode(self) -> NDArray[Any]:
        try:
            raw = base64.b64decode(self.data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("array data is not valid base64") from exc
        dtype = _DTYPES[self.dtype]
        if len(raw) % dtype.itemsize:
            raise ValueError(f"array data length is not a multiple of {dtype.itemsize} bytes")
        return np.frombuffer(raw, dtype=dtype)

    @classmethod
    def of(cls, array: Any) -> WireArray:
        """Encode a numeric array (uint64 and float32 as they are, other integers as int64,
        other floats as float64)."""
        arr = np.asarray(array)
        if arr.dtype == np.uint64:
            name = "uint64"
        elif arr.dtype == np.float32:
            name = "float32"
        elif np.issubdtype(arr.dtype, np.integer):
            name = "int64"
        else:
            name = "float64"
        data = np.ascontiguousarray(arr, dtype=_DTYPES[name]).tobytes()
        return cls(dtype=name, shape=arr.shape, data=base64.b64encode(data).decode("ascii"))

    def to_numpy(self) -> NDArray[Any]:
        """The decoded array (a fresh, writable copy in native byte order)."""
        return self._decode().astype(self._native(), copy=True).reshape(self.shape)

    def _native(self) -> np.dtype[Any]:
        return np.dtype(self.dtype)
