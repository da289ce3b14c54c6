"""Metric names a PromQL expression selects, without a PromQL parser dependency.

What is not a metric name is removed first: string literals (label values, regexes), label
matcher blocks (``{...}``, keeping any ``__name__`` they pin), range and subquery brackets,
``by``/``without``/``on``/``ignoring``/``group_left``/``group_right`` label lists, Grafana
variables, durations and number literals. The identifiers left that are neither functions (followed by
``(``) nor keywords are metric names.
"""

from __future__ import annotations

import re

KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or",
     "unless", "inf", "nan", "atan2", "start", "end"}
)  # fmt: skip
AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
     "quantile", "limitk", "limit_ratio"}
)  # fmt: skip

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r'__name__\s*=\s*("(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_DURATION = re.compile(r"(?<![\w:])(?:\d+(?:ms|[smhdwy]))+(?![\w:])")
_NUMBER = re.compile(r"(?<![\w:])(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)")
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """Names of the series an expression selects (``up``, recording rules and exported metrics)."""
    names = {m.group(1)[1:-1] for m in _NAME_MATCHER.finditer(expr)}
    text = _VARIABLE.sub(" ", expr)
    text = _STRING.sub('""', text)
    text = _BRACES.sub(" ", text)
    while _BRACKETS.search(text):
        text = _BRACKETS.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    text = _DURATION.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    for m in _IDENT.finditer(text):
        word, call = m.group(1), m.group(2)
        if call or word in KEYWORDS or word in AGGREGATIONS:
            continue
        names.add(word)
    return names


_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<inner>.*?)(?:,\s*(?P<label>[\w.]+))?\s*\)\s*$", re.S)


def variable_query_metric_names(query: str) -> set[str]:
    """Metric names in a Grafana variable query: ``label_values(expr, label)``, ``query_result(expr)``."""
    m = _LABEL_VALUES.match(query)
    if m:
        if m.group("label") is None:  # label_values(label): every series, no metric named
            return set()
        return metric_names(m.group("inner"))
    m = re.match(r"^\s*(?:query_result|metrics)\((?P<inner>.*)\)\s*$", query, re.S)
    return metric_names(m.group("inner") if m else query)
