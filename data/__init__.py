"""Built-in synthetic setups of the papers, loaders for the shared datasets, and splits."""
