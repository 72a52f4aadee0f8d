"""Write ``contracts/schema/``: one JSON Schema per record and the AsyncAPI document.

``python -m contracts.generate`` (``make contracts``) writes the files;
``--check`` writes nothing and exits 1 naming the stale ones. The output is
byte-stable, so regenerating an unchanged tree leaves no diff: JSON is
orjson-indented with sorted keys and a trailing newline; YAML is dumped in
the fixed order the document is built in, with no anchors. The schemas
themselves are made in ``contracts.wire_schema`` and ``contracts.asyncapi``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson
import yaml

from contracts.asyncapi import asyncapi_document
from contracts.wire_schema import Schema, json_schemas

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
ASYNCAPI_FILE = "asyncapi.yaml"


class _Dumper(yaml.SafeDumper):
    """No anchors or aliases: every node is written out in full."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_json(schema: Schema) -> bytes:
    """Sorted, two-space indented JSON with a trailing newline."""
    return orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def render_yaml(document: Schema) -> bytes:
    """YAML in the document's own key order."""
    text = yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return text.encode("utf-8")


def render() -> dict[str, bytes]:
    """Every generated file's name (relative to ``contracts/schema``) and bytes."""
    schemas = json_schemas()
    files = {f"{stem}.schema.json": render_json(s) for stem, s in sorted(schemas.items())}
    files[ASYNCAPI_FILE] = render_yaml(asyncapi_document(schemas))
    return files


def stale(directory: Path, files: dict[str, bytes]) -> list[str]:
    """Names that differ from ``files`` or are missing, and leftovers no longer generated."""
    out = [name for name, data in files.items()
           if not (directory / name).is_file() or (directory / name).read_bytes() != data]
    if directory.is_dir():
        leftovers = [*directory.glob("*.schema.json"), *directory.glob("*.yaml")]
        out += [p.name for p in leftovers if p.name not in files]
    return sorted(out)


def write(directory: Path, files: dict[str, bytes]) -> list[str]:
    """Write what changed and remove leftovers; return the names touched."""
    touched = stale(directory, files)
    directory.mkdir(parents=True, exist_ok=True)
    for name in touched:
        if name in files:
            (directory / name).write_bytes(files[name])
        else:
            (directory / name).unlink()
    return touched


def main(argv: list[str] | None = None) -> int:
    """Command line: write the files, or ``--check`` them."""
    parser = argparse.ArgumentParser(prog="python -m contracts.generate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and list the stale files")
    parser.add_argument("--out", type=Path, default=SCHEMA_DIR,
                        help="directory to write or check (default: contracts/schema)")
    args = parser.parse_args(argv)
    files = render()
    if args.check:
        outdated = stale(args.out, files)
        for name in outdated:
            print(f"stale: {args.out / name}", file=sys.stderr)
        if outdated:
            print("regenerate with `make contracts`", file=sys.stderr)
        return 1 if outdated else 0
    touched = write(args.out, files)
    for name in touched:
        print(f"wrote {args.out / name}")
    if not touched:
        print(f"{args.out}: up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
