#!/usr/bin/env bash
# The test suite: API checks, lint, types, then every test but the slow ones, three test files
# at a time, and the sandbox's and hostile code's tests once more from a checkout under /tmp
# (scripts/test_tmp_layout.sh). --all runs the slow ones too; --fast only the tests that start
# no process.
# Extra arguments go to pytest (for example: scripts/test.sh -m slow, or -n 4 for more workers).
set -euo pipefail
case "${1:-}" in
  --fast) lane=(-m "not integration" tests) ;;
  --all) lane=(-n 3 --dist loadfile tests) ;;
  *) lane=(-n 3 --dist loadfile -m "not slow" tests) ;;
esac
[[ "${1:-}" == --fast || "${1:-}" == --all ]] && shift
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
step "layers" lint-imports --no-cache
step "pytest" pytest "${lane[@]}" "$@"
# The sandbox's and hostile code's tests again from a checkout under /tmp, TMPDIR unset.
[[ "${lane[0]}" == -m && "${lane[1]}" == "not integration" ]] ||
  step "pytest, the checkout under /tmp" scripts/test_tmp_layout.sh
