"""Helpers shared by every stage (file I/O, provenance). Imports no stage."""
