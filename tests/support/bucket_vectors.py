"""Pinned bucket-hash vectors: the layout tests check the hash against them, the JVM conformance tests the JVM's."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

#: Pinned literal values: if the hash spec changes, every existing table's bucket assignment breaks.
PINNED: list[tuple[list[pa.Array], int]] = [
    ([pa.array([0], pa.int64())], 0x820D6786FDA34D70),
    ([pa.array([1], pa.int64())], 0x64664958A42FD309),
    ([pa.array([-1], pa.int64())], 0xD49704C49EFA7EEC),
    ([pa.array([42], pa.int32())], 0x2A1748E2C0B21F7C),
    ([pa.array([2**31 - 1], pa.int32())], 0xD2135974149C2A9C),
    ([pa.array([2**63 - 1], pa.int64())], 0xE1D860503B401B4A),
    ([pa.array([-(2**63)], pa.int64())], 0xD0441CF26D1D5C86),
    ([pa.array([""], pa.string())], 0x4D33A93727192487),
    ([pa.array(["a"], pa.string())], 0xD37FACF70EE014CF),
    ([pa.array(["order-1"], pa.string())], 0xB031F8EAD229ABCD),
    ([pa.array(["münchen"], pa.string())], 0xDD4DB15E023C2800),
    ([pa.array(["日本語🙂"], pa.string())], 0x15A5BE63DC693F81),
    ([pa.array([dt.date(1970, 1, 1)], pa.date32())], 0x820D6786FDA34D70),
    ([pa.array([dt.date(2026, 11, 21)], pa.date32())], 0x3020147FAB942EB4),
    ([pa.array([dt.date(1969, 12, 31)], pa.date32())], 0xD49704C49EFA7EEC),
    ([pa.array([123456789], pa.int64()), pa.array(["eu"], pa.string())], 0xA0EC87B2E0FB652B),
    ([pa.array([-5], pa.int64()), pa.array([""], pa.string())], 0x188888BEC763A2CA),
]
