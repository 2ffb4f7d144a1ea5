#!/bin/sh
# `cmake --install BUILD --prefix P` gives P/bin/umswap, P/lib/libumswap.so and
# P/include/umswap/umswap.h, and the installed umswap preloads the installed library.
set -eu
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" > /dev/null
for f in bin/umswap lib/libumswap.so include/umswap/umswap.h; do
  if [ ! -f "$prefix/$f" ]; then
    echo "install_test: $f is not installed under $prefix" >&2
    exit 1
  fi
done
preloaded=$("$prefix/bin/umswap" run --mode passthrough -- sh -c 'printf %s "$LD_PRELOAD"')
if [ "$preloaded" != "$prefix/lib/libumswap.so" ]; then
  echo "install_test: the installed umswap preloads '$preloaded', not $prefix/lib/libumswap.so" >&2
  exit 1
fi
"$prefix/bin/umswap" --version
echo "install_test: ok"
