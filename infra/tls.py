"""TLS for the services and their clients: the ``[tls]`` config table, and mutual TLS.

:class:`TlsSettings` is a ``[tls]`` table (paths relative to the config file): ``certificate``
and ``key`` (served, or presented as a client), ``ca`` (verifies the servers called; public
CAs when absent), and for services ``client_ca`` / ``require_client_certificate`` (mutual TLS
at the handshake), ``participant_auth`` ("token" or "certificate") and, at the counting
service, ``coordinator_name``. :meth:`TlsSettings.uvicorn_options` serves HTTPS with an h11
protocol that passes the client certificate chain to the app (the ASGI ``tls`` extension).

Contracts: under mutual TLS a certificate must name the principal its bearer token
authenticates (:func:`certificate_mismatch`); with ``participant_auth = "certificate"`` a
request without a token is the one current member its certificate names
(:func:`certified_member`); a revoked member's certificate stops working at once.

Design notes: ``docs/services.md`` (§ TLS and mutual TLS).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal, get_args

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID
from pydantic import BaseModel, ConfigDict, Field, create_model

from fedclust.infra.body_limit import deferred_body_protocol
from fedclust.infra.config_toml import TABLE, ConfigFile, parse

__all__ = [
    "CLIENT_KEYS", "COORDINATOR_NAME", "COUNTING_KEYS", "SERVER_KEYS", "ClientTls",
    "CountingTls", "ServerTls", "TlsSettings", "certificate_mismatch", "certificate_names",
    "certificate_sha256", "certified_member", "serving_ca",
]

#: The name the coordinator's certificate carries unless the counting service says otherwise
#: (``fedclust pki issue coordinator``).
COORDINATOR_NAME: Final = "coordinator"
#: How a service authenticates participants: a bearer token (with its certificate under mutual
#: TLS), or the verified client certificate alone.
ParticipantAuth = Literal["token", "certificate"]
#: A PEM file named in ``[tls]``, relative to the config file.
PemPath = Annotated[str, Field(pattern=r"\S")]
_PEM: Final = "the path of a PEM file"


class ClientTls(BaseModel):
    """A client's ``[tls]`` table (the participant agent, the analyst)."""

    model_config = ConfigDict(**TABLE, frozen=True)

    certificate: PemPath | None = Field(default=None, description=_PEM)
    key: PemPath | None = Field(default=None, description=_PEM)
    ca: PemPath | None = Field(default=None, description=_PEM)


class ServerTls(ClientTls):
    """A service's ``[tls]`` table: a client's keys and those of mutual TLS."""

    client_ca: PemPath | None = Field(default=None, description=_PEM)
    require_client_certificate: bool = False
    participant_auth: ParticipantAuth = Field(
        default="token", description='"token" or "certificate"'
    )


class CountingTls(ServerTls):
    """The counting service's ``[tls]`` table: a service's, and the coordinator's name."""

    coordinator_name: str = Field(
        default=COORDINATOR_NAME, pattern=r"\S",
        description="the name (common name or DNS name) of the coordinator's certificate",
    )


CLIENT_KEYS: Final = frozenset(ClientTls.model_fields)
SERVER_KEYS: Final = frozenset(ServerTls.model_fields)
#: The counting service's ``[tls]`` keys: a service's, and the coordinator's certificate name.
COUNTING_KEYS: Final = frozenset(CountingTls.model_fields)


def _tls_file(table: type[ClientTls]) -> type[ConfigFile]:
    """A file of one optional ``[tls]`` table: what :meth:`TlsSettings.from_table` reads."""
    tls: Any = (table | None, None)
    model: type[ConfigFile] = create_model(f"_{table.__name__}File", __base__=ConfigFile, tls=tls)
    return model


_TLS_FILES: Final = {
    frozenset(m.model_fields): _tls_file(m) for m in (ClientTls, ServerTls, CountingTls)
}

_Scope = MutableMapping[str, Any]
_Message = MutableMapping[str, Any]
_ASGIApp = Callable[
    [_Scope, Callable[[], Awaitable[_Message]], Callable[[_Message], Awaitable[None]]],
    Awaitable[None],
]


@dataclass(frozen=True)
class TlsSettings:
    """One process's ``[tls]`` table; the default (all empty) means plain HTTP.

    Attributes:
        certificate, key: this process's certificate chain and private key (PEM files); a
            service serves HTTPS with them, a client presents them when asked.
        ca: the CA certificate(s) that servers this process calls must chain to.
        client_ca: (services) the CA that client certificates must chain to; setting it
            requires client certificates.
        require_client_certificate: (services) require client certificates of ``client_ca``,
            or of ``ca`` when no ``client_ca`` is set.
        participant_auth: (services, mutual TLS only) "certificate": a participant may
            authenticate by its client certificate alone (:func:`certified_member`).
        coordinator_name: (the counting service, mutual TLS) the name the coordinator's
            client certificate must carry for its token to be accepted.
    """

    certificate: Path | None = None
    key: Path | None = None
    ca: Path | None = None
    client_ca: Path | None = None
    require_client_certificate: bool = False
    participant_auth: ParticipantAuth = "token"
    coordinator_name: str = COORDINATOR_NAME

    def __post_init__(self) -> None:
        if (self.certificate is None) != (self.key is None):
            raise ValueError("[tls] needs both certificate and key, or neither.")
        if self.verifies_clients:
            if self.certificate is None:
                raise ValueError(
                    "[tls] requires client certificates but has no certificate and key to "
                    "serve HTTPS with; add them."
                )
            if self.client_ca is None and self.ca is None:
                raise ValueError(
                    "[tls] require_client_certificate needs client_ca (or ca): the CA that "
                    "client certificates must chain to."
                )
        if self.participant_auth not in get_args(ParticipantAuth):
            raise ValueError('[tls] participant_auth must be "token" or "certificate".')
        if self.participant_auth == "certificate" and not self.verifies_clients:
            raise ValueError(
                '[tls] participant_auth = "certificate" needs mutual TLS: set client_ca (or '
                "require_client_certificate), so that only verified certificates identify."
            )
        if not isinstance(self.coordinator_name, str) or not self.coordinator_name.strip():
            raise ValueError(
                "[tls] coordinator_name must be the name (common name or DNS name) of the "
                "coordinator's certificate."
            )

    @property
    def serves_https(self) -> bool:
        """Whether a service with these settings serves HTTPS."""
        return self.certificate is not None

    @property
    def verifies_clients(self) -> bool:
        """Whether a service with these settings requires client certificates (mutual TLS)."""
        return self.client_ca is not None or self.require_client_certificate

    @classmethod
    def from_table(
        cls, table: object, *, base: Path, allowed: frozenset[str] = SERVER_KEYS
    ) -> TlsSettings:
        """A ``[tls]`` table (None: no TLS) of the kind whose keys are ``allowed``
        (:data:`CLIENT_KEYS`, :data:`SERVER_KEYS` or :data:`COUNTING_KEYS`), validated by its
        model and read by :meth:`from_model`.

        Raises:
            ValueError: as :meth:`from_model`, or an unknown key or a value of the wrong type
                (naming the key).
        """
        if allowed not in _TLS_FILES:
            raise ValueError("allowed must be CLIENT_KEYS, SERVER_KEYS or COUNTING_KEYS")
        parsed: Any = parse(_TLS_FILES[allowed], {"tls": table})
        return cls.from_model(parsed.tls, base=base)

    @classmethod
    def from_model(cls, table: ClientTls | None, *, base: Path) -> TlsSettings:
        """The settings of a validated ``[tls]`` table (None: no TLS); relative paths resolve
        against ``base``.

        Raises:
            ValueError: a file that does not exist or does not load (not PEM, a key not
                matching its certificate), or keys that do not go together; the message
                names the key.
        """
        if table is None:
            return cls()
        paths: dict[str, Path] = {}
        for key in ("certificate", "key", "ca", "client_ca"):
            value = getattr(table, key, None)
            if value is None:
                continue
            path = Path(value).expanduser()
            path = path if path.is_absolute() else base / path
            if not path.is_file():
                raise ValueError(f"[tls] {key}: no file at {path}.")
            paths[key] = path
        options = table.model_dump(exclude=set(CLIENT_KEYS) | {"client_ca"})
        settings = cls(
            certificate=paths.get("certificate"), key=paths.get("key"), ca=paths.get("ca"),
            client_ca=paths.get("client_ca"), **options,
        )
        settings._load_files()
        return settings

    def httpx_verify(self) -> ssl.SSLContext | bool:
        """httpx's ``verify``: a context trusting ``ca`` and presenting ``certificate``.

        True (httpx's default, public CAs) when neither is configured.

        Raises:
            ValueError: a file does not load (naming its key in ``[tls]``).
        """
        if self.ca is None and self.certificate is None:
            return True
        context = ssl.create_default_context()
        if self.ca is not None:
            _load_ca(context, self.ca, "ca")
        if self.certificate is not None:
            try:
                context.load_cert_chain(self.certificate, self.key)
            except (ssl.SSLError, OSError) as exc:
                raise ValueError(
                    f"[tls] certificate and key: {self.certificate} and {self.key} are not a "
                    f"PEM certificate and its private key ({_reason(exc)})."
                ) from None
        return context

    def _load_files(self) -> None:
        """Load every configured file once, so a bad one is named when the config is read."""
        self.httpx_verify()
        if self.client_ca is not None:
            _load_ca(ssl.create_default_context(), self.client_ca, "client_ca")

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`uvicorn.Config` serving a service with these settings.

        Always the body-deferring h11 protocol (:func:`deferred_body_protocol`); with a
        certificate, HTTPS; with mutual TLS, client certificates are required
        (``ssl.CERT_REQUIRED``) and requests carry the ASGI ``tls`` extension.
        """
        options: dict[str, Any] = {"http": deferred_body_protocol()}
        if self.certificate is None:
            return options
        options |= {"ssl_certfile": str(self.certificate), "ssl_keyfile": str(self.key)}
        if self.verifies_clients:
            client_ca = self.client_ca if self.client_ca is not None else self.ca
            options |= {
                "ssl_ca_certs": str(client_ca),
                "ssl_cert_reqs": ssl.CERT_REQUIRED,
                "http": _peer_certificate_protocol(),
            }
        return options


def serving_ca(tls: TlsSettings) -> x509.Certificate | None:
    """The root CA certificate of the chain a service serves: from the leaf (the first
    certificate of ``certificate``), issuer by issuer through the certificates of
    ``certificate``, ``ca`` and ``client_ca``, to a self-signed one. None without HTTPS, or
    when the chain leads to a certificate none of those files holds (a public CA's)."""
    if tls.certificate is None:
        return None
    known: list[x509.Certificate] = []
    for path in (tls.certificate, tls.ca, tls.client_ca):
        if path is not None:
            known += x509.load_pem_x509_certificates(path.read_bytes())
    cert = known[0]
    for _ in range(len(known)):
        if cert.issuer == cert.subject:
            return cert if cert is not known[0] else None  # a self-signed leaf is no CA
        issuers = [c for c in known if c.subject == cert.issuer and _signed_by(cert, c)]
        if not issuers:
            return None
        cert = issuers[0]
    return None


def certificate_sha256(cert: x509.Certificate) -> str:
    """A certificate's fingerprint: the SHA-256 (hex) of its DER encoding."""
    return cert.fingerprint(hashes.SHA256()).hex()


def _signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _load_ca(context: ssl.SSLContext, path: Path, key: str) -> None:
    try:
        context.load_verify_locations(cafile=path)
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(
            f"[tls] {key}: {path} holds no PEM CA certificate ({_reason(exc)})."
        ) from None


def _reason(exc: OSError) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc.strerror or exc)


def certificate_names(scope: Mapping[str, Any]) -> frozenset[str] | None:
    """The names of the request's client certificate: subject CNs, SAN DNS names and URIs.

    None when the request carries no client certificate (no ASGI ``tls`` extension).
    """
    extensions = scope.get("extensions") or {}
    tls = extensions.get("tls") if isinstance(extensions, Mapping) else None
    chain = tls.get("client_cert_chain") if isinstance(tls, Mapping) else None
    if not chain:
        return None
    cert = x509.load_pem_x509_certificate(str(chain[0]).encode("ascii"))
    names = {
        str(attr.value) for attr in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    }
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset(names)
    names.update(san.get_values_for_type(x509.DNSName))
    names.update(san.get_values_for_type(x509.UniformResourceIdentifier))
    return frozenset(names)


def certificate_mismatch(
    scope: Mapping[str, Any], name: str, *, tls: TlsSettings, role: str = "participant"
) -> str | None:
    """Why the request's client certificate does not identify ``role`` ``name``, or None.

    Always None without mutual TLS; under it, the certificate must name the principal whose
    credential the request carries (its common name, a SAN DNS name or a SAN URI equal to
    ``name``: a participant's id, an analyst's name, the coordinator's ``coordinator_name``).
    """
    if not tls.verifies_clients:
        return None
    names = certificate_names(scope)
    if names is None:
        return (
            "mutual TLS is required but the request carries no client certificate; serve "
            "the app with TlsSettings.uvicorn_options()"
        )
    if name not in names:
        return (
            f"the client certificate does not name {role} {name!r}; under mutual TLS a "
            "token is accepted only with a certificate naming its holder: present the "
            f"certificate issued to {name!r} with its token"
        )
    return None


def certified_member(
    scope: Mapping[str, Any], *, tls: TlsSettings, is_member: Callable[[str], bool]
) -> str | None:
    """The member a request's client certificate alone identifies, or None.

    Only where ``tls.participant_auth`` is "certificate" (which needs mutual TLS, so the
    certificate was verified at the handshake); the certificate must name exactly one
    current member (:func:`certificate_names`).
    """
    if tls.participant_auth != "certificate":
        return None
    names = certificate_names(scope)
    members = [name for name in names or () if is_member(name)]
    return members[0] if len(members) == 1 else None


def _with_peer_certificate(app: _ASGIApp, der: bytes) -> _ASGIApp:
    """``app`` with the ASGI ``tls`` extension naming the client certificate ``der``."""
    pem = ssl.DER_cert_to_PEM_cert(der)
    name = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    extension = {
        "server_cert": None, "client_cert_chain": [pem], "client_cert_name": name,
        "client_cert_error": None, "tls_version": None, "cipher_suite": None,
    }

    async def call(
        scope: _Scope,
        receive: Callable[[], Awaitable[_Message]],
        send: Callable[[_Message], Awaitable[None]],
    ) -> None:
        scope["extensions"] = {**(scope.get("extensions") or {}), "tls": extension}
        await app(scope, receive, send)

    return call


@functools.cache
def _peer_certificate_protocol() -> type[asyncio.Protocol]:
    """:func:`deferred_body_protocol`, passing each connection's client certificate to the app."""

    base: Any = deferred_body_protocol()

    class PeerCertificateProtocol(base):  # type: ignore[misc]
        app: _ASGIApp

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if der:
                self.app = _with_peer_certificate(self.app, der)

    return PeerCertificateProtocol

