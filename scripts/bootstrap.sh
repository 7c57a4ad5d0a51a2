#!/usr/bin/env bash
# Prepares this checkout: checks for the tools the mesh needs (Python 3.11+,
# Java 17+, Node.js with npm, jq for the README's shell journey), then installs
# every Python package into .venv and the buf CLI into node_modules. Running it again reinstalls only what
# pyproject.toml, constraints.txt or package-lock.json changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf '==> %s\n' "$*"; }
fail() {
  printf '\nerror: %s\n' "$*" >&2
  exit 1
}

find_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

python=$(find_python) ||
  fail "Python 3.11 or newer is needed. On Debian or Ubuntu: sudo apt-get install python3 python3-venv"

if ! command -v java >/dev/null 2>&1; then
  fail "Java 17 or newer is needed by PySpark, and there is no java on PATH.
On Debian or Ubuntu: sudo apt-get install openjdk-17-jre-headless"
fi
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
if [ "${java_major:-0}" -lt 17 ]; then
  fail "Java 17 or newer is needed by PySpark; the java on PATH is version ${java_major:-unknown}.
On Debian or Ubuntu: sudo apt-get install openjdk-17-jre-headless"
fi

if ! command -v npm >/dev/null 2>&1; then
  fail "Node.js and npm are needed for the buf CLI (protobuf lint and breaking-change checks).
On Debian or Ubuntu: sudo apt-get install nodejs npm"
fi

if ! command -v jq >/dev/null 2>&1; then
  # Only the README's shell journey (and its test) reads JSON with jq.
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing jq (Debian package)"
    apt-get install -y -qq jq >/dev/null || { apt-get update -qq && apt-get install -y -qq jq >/dev/null; } ||
      fail "could not install jq with apt-get; its messages above say why"
  else
    fail "jq is needed by the README's shell journey and its test.
On Debian or Ubuntu: sudo apt-get install jq"
  fi
fi

# Go, its gRPC and protobuf libraries and the stub generators, for the example Go client
# (clients/go, built offline by clients/go/build.sh against the libraries Debian installs under
# /usr/share/gocode). Optional: without them the mesh runs and only the Go client's tests are
# skipped, so this warns rather than fails. golang-github-golang-protobuf-1-5-dev is named on
# purpose: golang-google-grpc-dev depends on "…-1-3-dev | …-1-5-dev", so apt would pick the
# protobuf 1.3 runtime, with which a client panics at run time; naming 1.5 installs it instead
# (and replaces 1.3 where that is installed).
go_packages=(golang-go golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev
  golang-google-genproto-dev protoc-gen-go protoc-gen-go-grpc)
if command -v dpkg-query >/dev/null 2>&1; then
  missing=()
  for package in "${go_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'ok installed' || missing+=("$package")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "installing Go and its gRPC libraries for the Go client (Debian packages: ${missing[*]})"
      export DEBIAN_FRONTEND=noninteractive
      go_install() { apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
      go_install || { apt-get update -qq && go_install; } ||
        say "warning: could not install ${missing[*]} with apt-get (its messages above say why); the Go client's tests will be skipped"
    else
      say "warning: the Go client's tests will be skipped without these Debian packages: sudo apt-get install --no-install-recommends ${missing[*]}"
    fi
  fi
elif ! command -v go >/dev/null 2>&1; then
  say "warning: no Go on PATH: the Go client's tests will be skipped (clients/go/build.sh expects Debian's Go packages; see docs/api.md)"
fi

fingerprint() { cat "$@" | sha256sum | cut -d ' ' -f 1; }

if [ ! -x .venv/bin/python ]; then
  say "creating the virtual environment .venv"
  "$python" -m venv .venv ||
    fail "could not create a virtual environment. On Debian or Ubuntu: sudo apt-get install python3-venv"
fi
wanted=$(fingerprint pyproject.toml constraints.txt)
if [ "$(cat .venv/.installed 2>/dev/null)" != "$wanted" ]; then
  say "installing Python packages into .venv (the first time takes a few minutes)"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[stack,dev]' ||
    fail "could not install the Python packages; pip's messages above say which one and why (is PyPI reachable?)"
  echo "$wanted" >.venv/.installed
fi

wanted=$(fingerprint package.json package-lock.json)
if [ "$(cat node_modules/.installed 2>/dev/null)" != "$wanted" ]; then
  say "installing the buf CLI into node_modules"
  npm install --ignore-scripts --no-audit --no-fund --loglevel=error ||
    fail "could not install @bufbuild/buf from npm; npm's messages above say why (is the npm registry reachable?)"
  echo "$wanted" >node_modules/.installed
fi
