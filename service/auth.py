"""Bearer-token auth for the API: who is calling, and may they do this?

Roles: ``reader`` reads (needed only when ``auth.read_open`` is false), ``ingest`` pushes
NCCL records, ``operator`` may do everything (changing state, and what the other two do).
Every route that changes state declares its role with a dependency of
:mod:`graywire.service.api.deps` (``Operator``, ``Ingester``), which also puts the bearer scheme
in the OpenAPI document. Reads are guarded for the whole ``/api`` tree by
:meth:`Auth.read_guard`, an app-wide dependency, so a read route added later is covered
without remembering to. Missing or unknown token: 401; known token, wrong role: 403. The
dependencies are ``async``: a few comparisons, run on the event loop rather than a trip to the
thread pool per request.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fastapi import HTTPException, Request
from fastapi.security import HTTPBearer

from graywire.service.config import AuthSettings, RateLimit, TokenScope

Role = Literal["reader", "ingest", "operator"]
#: What each role may also do: an operator can read and push, nobody else does more than its own.
GRANTS: dict[Role, frozenset[Role]] = {
    "reader": frozenset({"reader"}),
    "ingest": frozenset({"ingest"}),
    "operator": frozenset({"reader", "ingest", "operator"}),
}
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <token>` (see `auth.tokens`)")


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller, as the audit log names it, with what its token limits its pushes to."""

    name: str
    role: Role
    #: The jobs and hosts its pushes may name (None: any host of the fabric model).
    scope: TokenScope | None = field(default=None, compare=False, repr=False)
    #: Its own push rate limit, replacing ``ingest.rate_limit``.
    rate_limit: RateLimit | None = field(default=None, compare=False, repr=False)


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


class Auth:
    def __init__(self, settings: AuthSettings) -> None:
        self.read_open = settings.read_open
        self._tokens: list[tuple[bytes, Principal]] = []
        for t in settings.tokens:
            secret = t.token if t.token is not None else _read_token_file(t.token_file, t.name)
            for known, other in self._tokens:
                # Which entry a shared secret stands for would be a guess (and a reader's
                # might be an operator's): refuse, naming the entries and never the secret.
                if hmac.compare_digest(known, secret.encode()):
                    raise ValueError(f"token {t.name!r} has the same secret as {other.name!r}")
            self._tokens.append((secret.encode(), Principal(t.name, t.role, t.scope, t.rate_limit)))

    def identify(self, token: str | None) -> Principal | None:
        """The token's owner, compared in constant time against every configured token."""
        if not token:
            return None
        given = token.encode()
        found = None
        for secret, principal in self._tokens:
            if hmac.compare_digest(secret, given):
                found = principal
        return found

    def check(self, token: str | None, role: Role) -> Principal:
        principal = self.identify(token)
        if principal is None:
            if not token:
                raise _unauthorized(f"this endpoint needs a bearer token with the {role} role")
            raise _unauthorized("unknown bearer token")
        if role not in GRANTS[principal.role]:
            raise HTTPException(403, f"token {principal.name!r} has role {principal.role}; this needs {role}")
        return principal

    def read_guard(self) -> Callable[..., None]:
        """App-wide dependency: reads under ``/api`` need a reader token unless reads are open."""

        async def dependency(request: Request) -> None:
            if self.read_open or request.method not in READ_METHODS:
                return
            # The matched route's own path: the URL's also carries any root_path (a proxy
            # prefix, or the app mounted inside another), which must not unlock reads.
            route = getattr(request.scope.get("route"), "path", None) or request.url.path
            if not route.startswith("/api/"):
                return  # /healthz, /metrics and the docs stay reachable for probes and scrapers
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            self.check(token.strip() if scheme.lower() == "bearer" else None, "reader")

        return dependency


def _read_token_file(path: Path | None, name: str) -> str:
    try:
        secret = Path(str(path)).read_text().strip()
    except OSError as e:
        raise ValueError(f"token {name!r}: cannot read token_file {path}: {e.strerror}") from e
    if len(secret) < 16:
        raise ValueError(f"token {name!r}: token_file {path} holds fewer than 16 characters")
    return secret
