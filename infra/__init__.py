"""What the services share and the maths never sees: authentication (``auth``), the app
skeleton (``app``), the database engine (``database``), settings from files, variables and
secrets, TLS, body limits, logging, probes and metrics, private files and schema migrations."""
