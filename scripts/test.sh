#!/usr/bin/env bash
# The whole test suite: API checks, lint, types, then every test.
# With --fast first, the fast lane: the same checks, then only the tests that start no process.
# Extra arguments go to pytest (for example: scripts/test.sh -k stack).
set -euo pipefail
lane=(tests)
if [[ "${1:-}" == "--fast" ]]; then
  shift
  lane=(-m "not integration" tests)
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PWD/node_modules/.bin:$PATH"

step() {
  printf '==> %s\n' "$1"
  shift
  "$@"
}

step "buf lint" buf lint
step "buf format" buf format --diff --exit-code
step "buf breaking" scripts/buf_breaking.sh
step "generated code is current" python scripts/gen_protos.py --check
step "ruff" ruff check .
step "ruff format" ruff format --check --quiet .
step "mypy" mypy
step "pytest" pytest "${lane[@]}" "$@"
