#!/usr/bin/env bash
# Builds the example Go client: generates the Go stubs (buf.gen.go.yaml) and compiles them with
# clients/go/*.go into OUT/journey (OUT: the one argument, build/go by default), offline, in
# GOPATH mode (GO111MODULE=off) over the Go libraries Debian installs under /usr/share/gocode
# (golang-google-grpc-dev, golang-google-genproto-dev, golang-github-golang-protobuf-1-5-dev;
# scripts/bootstrap.sh installs them as root on Debian). Nothing is downloaded. OUT holds a
# GOPATH of its own in which the client is the package the stubs are generated for,
# example.com/texera-lake-client; nothing is written into the checkout outside OUT.
# Exits 2, saying what to install, when Go or a library is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

out=$(realpath -m "${1:-build/go}")
gocode=${GOCODE:-/usr/share/gocode}
module=example.com/texera-lake-client

command -v go >/dev/null 2>&1 || {
  echo "go is not on PATH (Debian: apt-get install golang-go; scripts/bootstrap.sh does so as root)" >&2
  exit 2
}
for library in google.golang.org/grpc google.golang.org/genproto/googleapis/rpc/errdetails \
  google.golang.org/protobuf/proto github.com/golang/protobuf/ptypes/any; do
  [ -d "$gocode/src/$library" ] || {
    echo "$gocode/src/$library is missing (Debian: apt-get install golang-google-grpc-dev" \
      "golang-google-genproto-dev golang-github-golang-protobuf-1-5-dev)" >&2
    exit 2
  }
done

# The stubs land in $out/checkout/clients/go/gen, beside a copy of the client's sources.
rm -rf "$out/checkout" "$out/src"
PATH="$PWD/node_modules/.bin:$PATH" buf generate --template buf.gen.go.yaml -o "$out/checkout"
cp clients/go/*.go "$out/checkout/clients/go/"
mkdir -p "$out/src/$(dirname "$module")"
ln -s "$out/checkout/clients/go" "$out/src/$module"
GO111MODULE=off GOPROXY=off GOFLAGS= CGO_ENABLED=0 GOPATH="$out:$gocode" \
  go build -o "$out/journey" "$module"
