"""JSON Schema for every wire message, written to `schemas/json/` and committed.

A client in any language validates against these files; a test fails when they are stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from loreguard.schemas.output import ParsedOutput
from loreguard.schemas.wire import MESSAGES, Envelope, ErrorEnvelope


def json_schemas() -> dict[str, dict]:
    """File name -> JSON Schema, for the envelope, the error and each request and reply body."""
    schemas: dict[str, dict] = {
        "envelope.json": Envelope.model_json_schema(),
        "error.json": ErrorEnvelope.model_json_schema(),
        "model_output.json": ParsedOutput.model_json_schema(),
    }
    for name in sorted(MESSAGES):
        spec = MESSAGES[name]
        schemas[f"{name}.request.json"] = spec.request.model_json_schema()
        schemas[f"{name}.reply.json"] = spec.reply.model_json_schema()
    return schemas


def render(schema: dict) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def export_json_schemas(directory: Path) -> list[Path]:
    """Write every schema into `directory` (created if needed); returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, schema in json_schemas().items():
        path = directory / file_name
        path.write_text(render(schema), encoding="utf-8")
        written.append(path)
    return written
