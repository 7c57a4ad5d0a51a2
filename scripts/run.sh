#!/usr/bin/env bash
# Starts the whole mesh on this machine on its embedded defaults.
# Extra arguments go to texera-lake-stack (see: texera-lake-stack --help).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/bootstrap.sh
exec .venv/bin/texera-lake-stack up "$@"
