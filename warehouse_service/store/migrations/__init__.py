"""Versioned SQL migrations of the registry's database, applied in file-name order."""
