"""Jobs: what a `stitch` command asks for (a request), run once over any engine (`run`)."""
