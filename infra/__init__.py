"""What the services share and the maths never sees: TLS, settings, body limits, logging,
probes and metrics, database files and schema migrations."""
