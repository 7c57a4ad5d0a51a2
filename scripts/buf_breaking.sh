#!/usr/bin/env bash
# Checks that protos/ makes no breaking change against the API on main.
# On a branch other than main it compares with main; on main itself it
# compares with the previous commit. BUF_BREAKING_AGAINST overrides the
# baseline with any buf input (for example '.git#tag=v1.0.0').
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

against=${BUF_BREAKING_AGAINST:-}
if [ -z "$against" ]; then
  head=$(git rev-parse HEAD 2>/dev/null || true)
  main=$(git rev-parse --verify --quiet main || true)
  if [ -n "$main" ] && [ "$main" != "$head" ]; then
    ref=main
  else
    ref=$(git rev-parse --verify --quiet HEAD~1 || true)
  fi
  if [ -z "$ref" ] || ! git cat-file -e "$ref:buf.yaml" 2>/dev/null; then
    echo "buf breaking: no earlier version of the API to compare with; skipped"
    exit 0
  fi
  against=".git#ref=$ref"
fi
echo "buf breaking: comparing protos/ with $against"
node_modules/.bin/buf breaking --against "$against"
