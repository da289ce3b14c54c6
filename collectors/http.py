"""One bounded HTTP GET for the pull collectors (host agents, exporters): fetch apart from parse.

Every scrape opens and closes its own client, which its requests share; all clients share one
verifying TLS context, because building one loads the CA store (~50 ms of CPU). A body is read
in chunks and refused past its size limit, so a misbehaving target cannot fill the service's
memory.
"""

from __future__ import annotations

import ssl

import httpx

_SSL_CONTEXT: ssl.SSLContext | None = None


def ssl_context() -> ssl.SSLContext:
    """The one verifying context every scrape uses."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context()
    return _SSL_CONTEXT


def scrape_client(timeout: float) -> httpx.AsyncClient:
    """A client for one scrape's requests (so a second request to the same target reuses the
    first's connection), closed with the scrape: no socket outlives a poll."""
    return httpx.AsyncClient(timeout=timeout, verify=ssl_context())


async def fetch_bounded(
    url: str, accept: str, max_bytes: int, timeout: float, client: httpx.AsyncClient | None = None
) -> tuple[int, str, bytes]:
    """Status, content type (lower case, no parameters) and body of ``GET url``; a body larger
    than ``max_bytes`` raises ``ValueError``, an HTTP failure ``httpx.HTTPError``. Without a
    ``client``, one of its own for this request."""
    if client is None:
        async with scrape_client(timeout) as own:
            return await fetch_bounded(url, accept, max_bytes, timeout, own)
    async with client.stream("GET", url, headers={"Accept": accept}) as resp:
        body = bytearray()
        async for chunk in resp.aiter_bytes():
            body += chunk
            if len(body) > max_bytes:
                raise ValueError(f"response larger than {max_bytes} bytes")
        ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        return resp.status_code, ctype, bytes(body)
