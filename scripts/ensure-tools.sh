#!/usr/bin/env bash
# Installs what `make test` needs and the machine may lack: a C compiler for
# the race detector (Debian's gcc), a browser for the test of the lock-story
# page (Debian's chromium) and staticcheck (from the Go module proxy, into
# ./.bin). Idempotent: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION="${STATICCHECK_VERSION:-v0.8.2}"
BIN="$PWD/.bin"

if ! command -v go >/dev/null 2>&1; then
  echo "ensure-tools: go is not on PATH; install Go 1.26 first" >&2
  exit 1
fi

# apt_install [apt-get options] PACKAGE...
apt_install() {
  local sudo="" opts=()
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do opts+=("$1"); shift; done
  echo "ensure-tools: installing Debian packages: $*" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${opts[@]}" "$@" >/dev/null
}

# The race detector needs cgo and a C toolchain.
if ! command -v gcc >/dev/null 2>&1; then
  apt_install gcc libc6-dev
fi

# benchmarks/story tests the lock-story page in headless Chromium (through
# chromedp), and fails when it is missing. About 125 MB to download; the
# install took 8 s on a developer machine.
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" -eq 0 ]; then
    apt_install --no-install-recommends chromium
  else
    echo "ensure-tools: chromium is missing: the browser test of benchmarks/story needs it; run" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends chromium" >&2
    exit 1
  fi
fi

if [ ! -x "$BIN/staticcheck" ] || ! "$BIN/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  echo "ensure-tools: installing staticcheck $STATICCHECK_VERSION into $BIN" >&2
  GOBIN="$BIN" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
