#!/usr/bin/env bash
# Installs what `make test` needs and the machine may lack: a C compiler for
# the race detector (Debian's gcc) and staticcheck (from the Go module proxy,
# into ./.bin). Idempotent: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION="${STATICCHECK_VERSION:-v0.8.2}"
BIN="$PWD/.bin"

if ! command -v go >/dev/null 2>&1; then
  echo "ensure-tools: go is not on PATH; install Go 1.26 first" >&2
  exit 1
fi

apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "ensure-tools: installing Debian packages: $*" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# The race detector needs cgo and a C toolchain.
if ! command -v gcc >/dev/null 2>&1; then
  apt_install gcc libc6-dev
fi

if [ ! -x "$BIN/staticcheck" ] || ! "$BIN/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  echo "ensure-tools: installing staticcheck $STATICCHECK_VERSION into $BIN" >&2
  GOBIN="$BIN" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
