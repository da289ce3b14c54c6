"""Hypothesis pieces shared by the parsers' property tests: bounded settings and junk to splice.

Inputs are real fixtures with one part replaced (a line spliced with junk, one value swapped
for an absurd one). ``GRAYWIRE_PROPERTY_EXAMPLES`` raises the count from the suite's default.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

PROPERTY = settings(
    max_examples=int(os.environ.get("GRAYWIRE_PROPERTY_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: Text that breaks naive parsers: numbers past 64 bits or a float, negative, Unicode digits
#: ``str.isdigit`` accepts and ``int`` refuses, control characters, the format's own separators.
JUNK = st.text(max_size=30) | st.sampled_from(
    [
        "9" * 400,
        "18446744073709551616",
        "99999999999999999999",
        "-1",
        "1e400",
        "nan",
        "²",
        "\x00",
        "\t",
        '"',
        ",",
        "{",
        "}",
        ":",
        "300X",
        "]",
        "\n",
        "0x10",
        "inf",
    ]
)

#: A JSON value where the format has a number or a string: huge and negative integers, floats
#: past double, absurd strings, nulls, booleans, and small nested containers.
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.integers(min_value=10**300, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    JUNK,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda v: st.lists(v, max_size=3) | st.dictionaries(st.text(max_size=8), v, max_size=3),
    max_leaves=6,
)


def spliced(text: str) -> st.SearchStrategy[str]:
    """``text`` with junk spliced into one of its lines (replacing up to 20 characters)."""
    lines = text.splitlines() or [""]

    @st.composite
    def build(draw: st.DrawFn) -> str:
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        at = draw(st.integers(0, len(line)))
        cut = draw(st.integers(0, 20))
        out = list(lines)
        out[i] = line[:at] + draw(JUNK) + line[at + cut :]
        return "\n".join(out) + "\n"

    return build()
