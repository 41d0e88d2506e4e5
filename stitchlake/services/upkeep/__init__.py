"""Keeping the table in shape: clean, archive, alter, savepoints."""
