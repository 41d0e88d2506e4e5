"""`python -m stitchlake.config [--write]`: print, or write to configs/table.schema.json, the config's JSON Schema."""

from .jsonschema import main

main()
