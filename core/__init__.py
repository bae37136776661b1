"""The lowest layer: the errors, the input validation and the strict pydantic base and
array encoding (``core.models``) every other layer shares."""
