"""The lowest layer: the errors and the input validation every other layer shares."""
