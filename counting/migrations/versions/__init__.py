"""One module per revision, each naming its ``down_revision``."""
