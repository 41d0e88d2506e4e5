"""JSON Schema of the table config YAML, generated from the model, for editors to complete and check configs.

`configs/table.schema.json` is this schema; regenerate it with `python -m stitchlake.config --write`
(a test fails when it is stale).
"""

from __future__ import annotations

import argparse
import json

from .model import TableConfig
from .yaml_schema import DIALECT, SHIPPED, JsonDict, YamlSchema


def table_config_schema() -> JsonDict:
    """The JSON Schema of a table config YAML file."""
    body = TableConfig.model_json_schema(schema_generator=YamlSchema)
    body.pop("title", None)
    body["description"] = "A stitchlake table config: one YAML file per table. Every field: configs/README.md."
    return {"$schema": DIALECT, "title": "stitchlake table config", **body}


def render() -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(table_config_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m stitchlake.config", description="Print (or --write) the JSON Schema of table config YAML files."
    )
    parser.add_argument("--write", action="store_true", help=f"write it to {SHIPPED}")
    args = parser.parse_args(argv)
    if args.write:
        SHIPPED.write_text(render(), encoding="utf-8")
    else:
        print(render(), end="")
