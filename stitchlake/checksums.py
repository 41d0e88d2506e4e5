"""Checksums of every byte a read trusts: data files, instant files, table.json, archive batches and checkpoints.

Parquet's page checksums leave its footer and page headers unprotected, and Avro's deflate blocks carry none, so
a flipped bit could change a value, a version or a file group without any reader noticing. A data file's digest is
recorded in the commit that names it and checked whenever the file is read. A metadata file carries its own: it
is JSON whose first key is `"checksum"`, the digest of the rest, so readers that predate it still parse it.

A sealed file starts with exactly `{"checksum": "`. Files written before checksums existed start with the fixed
bytes their writer always produced (`legacy` prefixes), which no single damaged byte of a sealed file turns into;
anything else is damage. The digest is XXH3-64: detecting damage, not resisting an attacker, at memory speed.
"""

from __future__ import annotations

from collections.abc import Sequence

import xxhash

from stitchlake.errors import CorruptFileError

#: The name recorded with each digest (commit file entries say `checksum: "xxh3:<hex>"`).
ALGORITHM = "xxh3"
SEAL = b'{"checksum": "'
_HEX = 16


def digest(data: bytes | bytearray | memoryview) -> str:
    """`xxh3:<16 hex digits>` of `data`."""
    return f"{ALGORITHM}:{xxhash.xxh3_64_hexdigest(data)}"


def verify(data: bytes | bytearray | memoryview, expected: str, where: str) -> None:
    """Refuse bytes whose digest is not the one their commit recorded."""
    found = digest(data)
    if found != expected:
        raise CorruptFileError(
            f"{where}: checksum mismatch (its commit recorded {expected}, the file has {found}): changed or damaged "
            "after it was written",
            file=where,
        )


def seal(body: bytes) -> bytes:
    """A JSON object's text with its checksum as the first key (the digest covers `body` exactly)."""
    if not body.startswith(b"{"):
        raise ValueError("only a JSON object can be sealed")
    rest = body[1:]
    hexdigest = xxhash.xxh3_64_hexdigest(body).encode()
    return SEAL + hexdigest + (b'"}' if rest.strip() == b"}" else b'", ' + rest)


def unseal(data: bytes, where: str, legacy: Sequence[bytes] = ()) -> bytes:
    """The JSON text `seal` was given, verified; a file from before checksums (starting with one of `legacy`) as
    it is. Anything else is damage."""
    if data.startswith(SEAL):
        hexdigest = data[len(SEAL) : len(SEAL) + _HEX]
        rest = data[len(SEAL) + _HEX :]
        if rest == b'"}':
            body = b"{}"
        elif rest.startswith(b'", '):
            body = b"{" + rest[3:]
        else:
            raise CorruptFileError(f"{where}: damaged checksum header", file=where)
        if xxhash.xxh3_64_hexdigest(body).encode() != hexdigest:
            raise CorruptFileError(
                f"{where}: checksum mismatch: the file was changed or damaged after it was written", file=where
            )
        return body
    if any(data.startswith(prefix) for prefix in legacy):
        return data
    raise CorruptFileError(f"{where}: damaged: it does not start with a checksum header", file=where)
