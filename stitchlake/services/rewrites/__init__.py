"""Rewriting file groups: compaction, rescale, key-level erase and what its purge removes besides."""
