#!/bin/sh
# Runs a GPU test, or says "umswap-test: no GPU" (CTest's skip pattern) where there is none.
# Each test gets an empty plan cache of its own (XDG_CACHE_HOME in a temporary folder, removed
# after), so that a `umswap run --budget` in it learns online as on a first run, whatever ran
# before, and nothing lands in the user's cache.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "umswap-test: no GPU"
  exit 0
fi
cache=$(mktemp -d) || exit 1
XDG_CACHE_HOME=$cache "$@"
status=$?
rm -rf "$cache"
exit $status
