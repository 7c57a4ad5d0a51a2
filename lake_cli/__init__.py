"""``texera-lake``: the command line for people using the mesh."""
