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


#: What launchers put in front of a process's lines: Ray's and SkyPilot's ``(head, rank=0, pid=3808)``,
#: mpirun's ``--tag-output`` ``[1,0]<stdout>:``, ``srun -l``'s ``12: ``.
_LAUNCHER = re.compile(
    r"^(?:\s*\([^()\n]*\bpid=\d+[^()\n]*\)\s?)?(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d{1,6}: )?"
)


def without_launcher_prefix(line: str) -> str:
    """``line`` without the tag a launcher put in front of it (nothing else is touched)."""
    m = _LAUNCHER.match(line)
    return line[m.end() :] if m and m.end() else line
