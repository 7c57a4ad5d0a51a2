"""Helpers for Python programs that call the mesh."""
