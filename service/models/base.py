"""The declarative base every table shares, and the column types that make SQLite and
PostgreSQL agree.

Everything sticks to portable types (``sqlalchemy.JSON``, plain strings with CHECK constraints
instead of native enums). The schema itself is owned by Alembic (``migrations/``).
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase

# Deterministic constraint names: Alembic batch mode on SQLite and later migrations can only
# drop or alter a constraint they can name.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    PostgreSQL keeps the offset (``timestamptz``) but returns it in the session time zone;
    SQLite drops it altogether. Values are normalized to UTC on the way in and tagged (or
    converted) to UTC on the way out, so callers always compare aware datetimes. Naive values
    are rejected: guessing their zone would silently shift incident times by hours.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()} given; use a timezone-aware UTC time")
        value = value.astimezone(UTC)
        # SQLite stores the text as given; drop the offset so stored values sort and compare.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


# Findings are appended on every poll, so their ids may outgrow 32 bits; SQLite only
# autoincrements an ``INTEGER PRIMARY KEY``, hence the variant.
FindingId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class Base(DeclarativeBase):
    """Declarative base for every graywire table; its metadata is Alembic's target."""

    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: sa.JSON(),
    }


def in_check(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def to_jsonable(value: Any) -> Any:
    """Turn detector evidence into strict JSON values.

    Evidence is built from numpy and pyarrow results: numpy scalars and arrays are not JSON
    serializable, and NaN/inf are not JSON at all (PostgreSQL rejects them). Non-finite floats
    become null, array-likes lists, datetimes ISO 8601 strings.
    """
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if hasattr(value, "tolist"):  # numpy arrays and scalars, without importing numpy here
        return to_jsonable(value.tolist())
    if hasattr(value, "to_pylist"):  # pyarrow arrays
        return to_jsonable(value.to_pylist())
    if hasattr(value, "as_py"):  # pyarrow scalars
        return to_jsonable(value.as_py())
    return str(value)


def row_to_dict(row: Base) -> dict[str, Any]:
    """A row as JSON-ready values: every mapped column, times in ISO 8601 with their offset.

    The one conversion every API answer and alert payload uses, so a row's shape is its table's.
    """
    out: dict[str, Any] = {}
    for attr in sa.inspect(type(row)).column_attrs:
        value = getattr(row, attr.key)
        out[attr.key] = value.isoformat() if isinstance(value, datetime) else value
    return out
