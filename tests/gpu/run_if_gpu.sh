#!/bin/sh
# Runs a GPU test, or says "umswap-test: no GPU" (CTest's skip pattern) where there is none.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "umswap-test: no GPU"
  exit 0
fi
exec "$@"
