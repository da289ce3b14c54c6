"""Service logs: one record is one line, whatever a caller put in the message."""

from __future__ import annotations

import logging

from graywire.service.logs import OneLineFormatter


def record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys

            exc_info = sys.exc_info()
    return logging.LogRecord("graywire.runner", logging.INFO, __file__, 1, msg, args, exc_info)


def test_a_pushed_hostname_cannot_forge_a_log_line() -> None:
    fmt = OneLineFormatter("%(levelname)s %(name)s: %(message)s")
    evil = "gpu-0001\n2026-12-01 09:00:00 CRITICAL graywire.auth: FORGED\r\u2028x"
    out = fmt.format(record("firing %s on %s", "nccl_straggler", evil))
    assert "\n" not in out and "\r" not in out and "\u2028" not in out
    assert out == (
        "INFO graywire.runner: firing nccl_straggler on gpu-0001\\n2026-12-01 09:00:00 CRITICAL "
        "graywire.auth: FORGED\\r\\u2028x"
    )


def test_passwords_in_urls_are_redacted_and_tracebacks_stay_under_their_record() -> None:
    fmt = OneLineFormatter("%(levelname)s %(message)s")
    out = fmt.format(record("scrape of %s failed", "http://admin:s3cret@ufm:8080/metrics", exc=True))
    first, *rest = out.split("\n")
    assert first == "INFO scrape of http://***@ufm:8080/metrics failed"
    assert rest and all(line.startswith("    ") for line in rest) and "ValueError: boom" in rest[-1]
    # The record itself is untouched for other handlers.
    r = record("x %s", "a\nb")
    fmt.format(r)
    assert (r.msg, r.args) == ("x %s", ("a\nb",))


def test_request_urls_are_never_logged_even_verbose() -> None:
    """httpx logs each request's URL at INFO; a Slack webhook URL is its credential."""
    from graywire.service.logs import configure

    for verbose in (False, True):
        configure(verbose)
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)


def test_a_password_with_an_at_sign_and_a_url_in_a_traceback_are_redacted() -> None:
    fmt = OneLineFormatter("%(message)s")
    try:
        raise RuntimeError("HTTP 401 from http://admin:p@ss@ufm:8080/metrics")
    except RuntimeError:
        import sys

        r = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "scrape %s", ("http://u:a@b@h/",), sys.exc_info()
        )
    out = fmt.format(r)
    assert "p@ss" not in out and "a@b" not in out and "***@ufm:8080" in out and "***@h/" in out
