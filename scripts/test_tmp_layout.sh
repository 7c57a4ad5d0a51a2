#!/usr/bin/env bash
# The sandbox's and hostile code's tests once more, from a copy of this checkout under /tmp and
# with TMPDIR unset: there the virtual environment, the code and every unit's home lie in the
# folder each task's sandbox covers, the layout in which a sandbox that exempted what tasks run
# would cover nothing of the unit. The copy holds the tracked files as they are now and the
# virtual environment (hard links where the file system allows them).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[ -x .venv/bin/python ] || {
  echo "error: no .venv here; run scripts/bootstrap.sh first" >&2
  exit 1
}
copy=$(env -u TMPDIR mktemp -d /tmp/texera-lake-checkout-XXXXXX)
trap 'rm -rf "$copy"' EXIT
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$copy"
cp -al .venv "$copy/.venv" 2>/dev/null || cp -a .venv "$copy/.venv"

cd "$copy"
echo "==> the sandbox's and hostile code's tests from $copy, TMPDIR unset"
env -u TMPDIR .venv/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadfile \
  tests/unit/test_sandbox.py \
  tests/integration/test_hostile_tasks.py \
  tests/integration/test_unit_confinement.py \
  "$@"
