"""The API's records against their one home: the tables they serve, and the routers that use them."""

from __future__ import annotations

import sqlalchemy as sa
from fastapi import FastAPI

from graywire.service.api import incidents, schemas
from graywire.service.api.main import api_router
from graywire.service.models import Exclusion, FindingRecord, Incident, Silence


def _columns(table: type) -> set[str]:
    return {a.key for a in sa.inspect(table).column_attrs}


def test_served_records_are_their_tables_columns() -> None:
    """A column added to a table without its schema (or the reverse) would be lost or invented."""
    pairs = [
        (schemas.IncidentOut, Incident),
        (schemas.FindingOut, FindingRecord),
        (schemas.SilenceOut, Silence),
        (schemas.ExcludeOut, Exclusion),
    ]
    # Derived when read, not stored: an incident's effects are the rows that name it as cause.
    derived = {schemas.IncidentOut: {"effects"}}
    for model, table in pairs:
        assert set(model.model_fields) - derived.get(model, set()) == _columns(table), model.__name__


def test_every_incident_route_is_in_the_incidents_router() -> None:
    app = FastAPI()
    app.include_router(api_router)
    served = {p for p in app.openapi()["paths"] if p.startswith(("/api/v1/incidents", "/api/v1/silences"))}
    mine = FastAPI()
    mine.include_router(incidents.router)
    assert served and served == set(mine.openapi()["paths"])


def test_every_answer_is_a_schema_record() -> None:
    """Each route with a JSON body names its response model, and the model lives in schemas."""
    app = FastAPI()
    app.include_router(api_router)
    checked = 0
    for path, ops in app.openapi()["paths"].items():
        for method, op in ops.items():
            ok = {c: r for c, r in op["responses"].items() if c.startswith("2") and c != "204"}
            for code, answer in ok.items():
                schema = answer["content"]["application/json"]["schema"]
                ref = schema.get("$ref") or schema.get("items", {}).get("$ref")
                assert ref, f"{method.upper()} {path} {code} has no response model"
                name = ref.rsplit("/", 1)[-1]
                assert hasattr(schemas, name), f"{method.upper()} {path}: {name} is not in schemas"
                checked += 1
    assert checked >= 20
