"""The pure numeric core: numpy functions with no I/O, one module per paper."""
