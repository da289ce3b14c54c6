"""Text as a terminal showed it: what a capture to a file keeps that a parser must not see.

``nvidia-smi topo -m`` wraps its header in ``ESC[4m … ESC[0m`` (underline) even when its output
goes to a file; ``script``, ``tmux`` and CI logs keep colours and CRLF line ends. Parsers read
the text with those removed, as a person reading the terminal would.
"""

from __future__ import annotations

import re

#: ECMA-48 escape sequences: CSI (``ESC [`` … final byte: colours, underline, cursor moves), OSC
#: (``ESC ]`` … BEL or ``ESC \\``: window titles, links), and the two-byte ``ESC`` + one character.
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


def plain_text(text: str) -> str:
    """``text`` without terminal escape sequences, with CRLF (and a lone CR) as LF."""
    if "\x1b" in text:
        text = _ESCAPE.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text
