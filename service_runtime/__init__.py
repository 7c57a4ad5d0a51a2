"""Runtime shared by every service of the mesh: config, logs, auth, errors, server."""
