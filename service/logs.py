"""Service logging: one record, one line, and nothing a caller sends can forge a line.

Messages carry caller-supplied strings (pushed host names, job ids, URLs): a newline in one
would start a line of its own that reads like a real record (``CRITICAL graywire.auth:
FORGED``). Control characters in the message are escaped (``\\n`` -> ``\\\\n``); a traceback
keeps its lines, each indented under its record. Userinfo in URLs is redacted everywhere.
"""

from __future__ import annotations

import logging

from graywire.collectors.base import redact_url

#: Control characters (C0, DEL, and the Unicode line separators) written as escapes.
_ESCAPES = {i: f"\\x{i:02x}" for i in (*range(0x20), 0x7F)} | {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    0x85: "\\x85",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def one_line(text: str) -> str:
    return redact_url(text.translate(_ESCAPES))


class OneLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        saved = record.msg, record.args
        record.msg, record.args = one_line(record.getMessage()), None
        try:
            head = super().format(record)
        finally:
            record.msg, record.args = saved
        first, _, rest = head.partition("\n")  # the traceback, if any, stays readable below it
        return (
            first
            if not rest
            else first + "\n" + "\n".join("    " + redact_url(ln) for ln in rest.splitlines())
        )


def configure(verbose: bool = False) -> None:
    """Root logging for the CLI: INFO (DEBUG with ``verbose``), one line per record."""
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # A no-op where logging is already set up (an embedding program, a test runner).
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    if not verbose:
        # Alembic announces each of its plugins at INFO on every start; the migrations it runs stay.
        logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    # httpx logs every request with its full URL at INFO: noise per scrape, and a Slack or
    # webhook URL is the credential itself. Never, even with --verbose.
    logging.getLogger("httpx").setLevel(logging.WARNING)
