"""The wire format: the pydantic models of every REST message, the single source of the
format, and the public bounds the protected sums are encoded with."""
