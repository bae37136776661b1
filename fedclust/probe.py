"""A container's probe of its own service: ``python -m fedclust.probe coordinator|counter``.

Reads the service's config as ``serve`` does (the TOML, ``FEDCLUST_…`` variables and secret
files) and asks the service on its own port, over loopback, ``GET /readyz`` (``--live``:
``GET /healthz``), speaking the service's own ``[tls]``:

- plain HTTP when the service serves plain HTTP;
- HTTPS when it serves HTTPS, trusting only the service's own certificate: the process on the
  port must present it (the name is not checked: the probe connects to 127.0.0.1);
- under mutual TLS, presenting that same certificate as the client certificate, so it must
  chain to ``client_ca`` (true of every certificate ``fedclust pki`` issues).

Exit status 0 when the answer is 200; else 1, with one line on stderr saying why. Docker's
healthcheck and Kubernetes' probes run it (``deploy/``): a plain ``GET`` from outside cannot
pass a handshake that requires a client certificate. It imports the settings only, not the
CLI, so a probe every few seconds costs about half a second of CPU.
"""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import sys
from collections.abc import Sequence
from typing import Final

from fedclust.infra.tls import TlsSettings

__all__ = ["main", "probe"]

_WILDCARDS: Final = frozenset({"", "0.0.0.0", "::"})


def _context(tls: TlsSettings) -> ssl.SSLContext:
    """Trust the service's own certificate; present it where clients must show one."""
    assert tls.certificate is not None and tls.key is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the leaf itself is the anchor
    context.load_verify_locations(cafile=tls.certificate)
    if tls.verifies_clients:
        context.load_cert_chain(tls.certificate, tls.key)
    return context


def probe(
    host: str, port: int, tls: TlsSettings, *, path: str = "/readyz", timeout: float = 4.0
) -> str | None:
    """None when ``GET path`` on the service at ``host:port`` answers 200, else why not.

    ``host`` is the address the service binds; a wildcard is asked on 127.0.0.1.
    """
    address = "127.0.0.1" if host in _WILDCARDS else host
    connection: http.client.HTTPConnection
    if tls.serves_https:
        connection = http.client.HTTPSConnection(
            address, port, timeout=timeout, context=_context(tls)
        )
    else:
        connection = http.client.HTTPConnection(address, port, timeout=timeout)
    scheme = "https" if tls.serves_https else "http"
    where = f"{scheme}://{address}:{port}{path}"
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read(4096)
    except ssl.SSLCertVerificationError as exc:
        return (f"{where}: the certificate served there is not the service's own "
                f"({exc.verify_message})")
    except (OSError, http.client.HTTPException) as exc:
        return f"{where}: {getattr(exc, 'reason', None) or exc}"
    finally:
        connection.close()
    if response.status == 200:
        return None
    try:
        detail = json.loads(body)
    except ValueError:
        detail = body.decode("utf-8", errors="replace").strip()
    return f"{where}: HTTP {response.status} {detail}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fedclust.probe",
        description="Ask a service on its own port whether it is ready (exit 0) or not (1).",
    )
    parser.add_argument("service", choices=("coordinator", "counter"))
    parser.add_argument("--config", metavar="FILE", help="the service's config file")
    parser.add_argument("--live", action="store_true", help="ask /healthz, not /readyz")
    parser.add_argument("--timeout", type=float, default=4.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    try:
        if args.service == "coordinator":
            from fedclust.coordinator.settings import CoordinatorSettings

            settings = CoordinatorSettings.load(args.config)
            host, port, tls = settings.host, settings.port, settings.tls
        else:
            from fedclust.counting.settings import CountingSettings

            counting = CountingSettings.load(args.config)
            host, port, tls = counting.host, counting.port, counting.tls
    except (OSError, ValueError) as exc:
        print(f"fedclust probe: {exc}", file=sys.stderr)
        return 1
    problem = probe(
        host, port, tls, path="/healthz" if args.live else "/readyz", timeout=args.timeout
    )
    if problem is not None:
        print(f"fedclust probe: {args.service} not {'live' if args.live else 'ready'}: "
              f"{problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
