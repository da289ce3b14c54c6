"""HTTP access to UFM: authentication, TLS and timeouts, shared by the REST and telemetry collectors.

UFM Enterprise serves its REST API under a prefix that selects the authentication scheme
(UFM REST API guide, "Authentication Methods" / "Access Tokens API"):

* basic authentication (user and password) under ``/ufmRest``;
* token authentication under ``/ufmRestV3``, with the access token sent as
  ``Authorization: Basic <access_token>`` (the token itself, not base64 of ``user:password``).

TLS certificates are verified by default: a UFM with a self-signed certificate is configured with
``ca_file`` (the CA or the certificate itself), and ``verify: false`` is an explicit escape hatch.
Every request has a connect and a read timeout, and the whole fetch a total deadline, so a UFM
that accepts the connection and then trickles or hangs fails the scrape in bounded time.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

AuthKind = Literal["basic", "token", "none"]

#: REST prefix per authentication scheme.
REST_PREFIX: dict[str, str] = {"basic": "/ufmRest", "token": "/ufmRestV3", "none": "/ufmRest"}


class UfmHttpError(RuntimeError):
    """A UFM request that did not give a usable answer; the message says what to check."""


#: Below this a body is never judged by its compression ratio: small, repetitive answers
#: (an empty list, one port's counters) compress far past any ratio and cost nothing.
RATIO_FLOOR = 16 << 20


@dataclass(frozen=True, slots=True)
class UfmHttpSettings:
    """How to reach one UFM endpoint. Secrets are plain strings here, already read from config."""

    auth: AuthKind = "none"
    username: str | None = None
    password: str | None = None
    token: str | None = None
    verify: bool = True
    ca_file: Path | None = None
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    total_timeout_s: float = 120.0
    #: Largest response body read; a bigger one (declared or streamed) fails the scrape before
    #: it is held in memory. UFM Telemetry of ~100k ports in Prometheus text is ~0.5 GB.
    max_body_bytes: int = 1 << 30
    #: How many times its size on the wire a compressed body may grow (a gzip bomb: 2 MB that
    #: inflates to 600 MiB); past it, once the body is over ``RATIO_FLOOR``, reading stops.
    max_decompression_ratio: float = 100.0
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.auth == "basic" and (not self.username or self.password is None):
            raise ValueError("basic authentication needs a username and a password")
        if self.auth == "token" and not self.token:
            raise ValueError("token authentication needs an access token")
        if self.ca_file is not None and not self.verify:
            raise ValueError("ca_file is set but verify is false: choose one")
        for name in ("connect_timeout_s", "read_timeout_s", "total_timeout_s", "max_body_bytes",
                     "max_decompression_ratio"):  # fmt: skip
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")

    def verify_arg(self) -> ssl.SSLContext | bool:
        """What httpx gets as ``verify``: the default CA store, a context trusting ``ca_file``, or off."""
        if not self.verify:
            return False
        if self.ca_file is not None:
            if not Path(self.ca_file).is_file():
                raise ValueError(f"ca_file {self.ca_file} does not exist")
            return ssl.create_default_context(cafile=str(self.ca_file))
        return True

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(
            connect=self.connect_timeout_s,
            read=self.read_timeout_s,
            write=self.read_timeout_s,
            pool=self.connect_timeout_s,
        )

    def auth_headers(self) -> dict[str, str]:
        """UFM's token scheme sends the token raw after ``Basic``; basic auth goes through httpx."""
        if self.auth == "token":
            return {"Authorization": f"Basic {self.token}"}
        return {}

    def httpx_auth(self) -> httpx.Auth | None:
        if self.auth == "basic":
            assert self.username is not None and self.password is not None
            return httpx.BasicAuth(self.username, self.password)
        return None


class UfmHttp:
    """One pooled async client per event loop (connections are the only state a collector keeps)."""

    def __init__(
        self, base_url: str, settings: UfmHttpSettings, transport: httpx.AsyncBaseTransport | None = None
    ):
        self.base_url = base_url.rstrip("/")
        self.settings = settings
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._verify = settings.verify_arg()  # fail at construction on a missing ca_file

    def _get_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            # A client is bound to the loop that opened its connections; a new loop needs a new one.
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                auth=self.settings.httpx_auth(),
                headers={**self.settings.headers, **self.settings.auth_headers()},
                verify=self._verify,
                timeout=self.settings.timeout(),
                transport=self._transport,
                follow_redirects=False,
            )
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = None

    async def get_bytes(self, path: str) -> tuple[bytearray, str]:
        """GET ``path`` (relative to the base URL); the whole body and its content type.

        Raises :class:`UfmHttpError` with the URL and what to check on a status other than 200,
        or on a body over ``max_body_bytes`` (declared or as it streams, so it is never held),
        and lets httpx's own errors (timeouts, refused connections, TLS failures, a body cut
        short against its Content-Length or chunking) through for the caller to report.
        """
        client = self._get_client()
        limit = self.settings.max_body_bytes
        async with client.stream("GET", path) as resp:
            declared = resp.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise UfmHttpError(
                    f"{resp.request.url} declares a {int(declared):,}-byte body, over the {limit:,}-byte "
                    "limit (max_body_bytes): not read"
                )
            ratio = self.settings.max_decompression_ratio
            buf = bytearray()
            async for chunk in resp.aiter_bytes():
                buf += chunk
                if len(buf) > limit:
                    raise UfmHttpError(
                        f"{resp.request.url} sent more than {limit:,} bytes (max_body_bytes): stopped reading"
                    )
                wire = resp.num_bytes_downloaded  # before decoding (gzip, deflate, br, zstd)
                if len(buf) > RATIO_FLOOR and len(buf) > ratio * max(wire, 1):
                    raise UfmHttpError(
                        f"{resp.request.url} inflates {wire:,} bytes on the wire to more than {len(buf):,} "
                        f"(over {ratio:g}x, max_decompression_ratio): stopped reading"
                    )
            # Read in full (a partial body raises in aiter_bytes, never returns). The buffer is
            # the body: a copy into bytes would hold it twice at its largest.
            body = buf
        if resp.status_code != 200:
            url = str(resp.request.url)
            hint = {
                401: "authentication failed: check the username/password or access token",
                403: "the UFM user lacks permission for this API",
                404: "no such endpoint: check the URL, the REST prefix and the telemetry path",
            }.get(resp.status_code, "")
            snippet = body[:200].decode("utf-8", "replace").strip()
            msg = f"HTTP {resp.status_code} from {url}"
            if hint:
                msg += f" ({hint})"
            if snippet:
                msg += f": {snippet!r}"
            raise UfmHttpError(msg)
        return body, resp.headers.get("content-type", "")
