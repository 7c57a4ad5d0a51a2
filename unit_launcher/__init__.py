"""Where computing units run: one interface (``base``), a module per kind of launcher."""
