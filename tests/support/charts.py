"""What a benchmark chart must be, for the benchmark tests that draw one."""

from __future__ import annotations

from pathlib import Path


def assert_png(path: Path) -> None:
    """A chart file that is a valid PNG image of a readable size."""
    from PIL import Image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] >= 400 and image.size[1] >= 200, (path, image.size)
