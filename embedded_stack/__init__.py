"""The embedded stack: the whole mesh on one machine, for development, demos and tests."""
