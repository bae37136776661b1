"""Built-in synthetic setups of the papers, loaders for the shared datasets, and splits."""

#: The built-in synthetic setups, by the name ``--dataset`` takes (here, not in
#: ``data.federations``, so a command's help names them without loading numpy).
SYNTHETIC = ("motivational", "garst-grid")
