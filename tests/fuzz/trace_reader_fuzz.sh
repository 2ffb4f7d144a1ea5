#!/bin/bash
# CTest's fuzz entry (label fuzz): builds the trace reader's libFuzzer target (core/fuzz/) with
# clang in a build directory of its own, writes the seed corpus of valid traces, and runs the
# fuzzer for SECONDS. Any crash, sanitizer report, leak, input slower than 10 s, allocation over
# 256 MiB or resident memory over 512 MiB fails the test; the input is kept under BUILD/artifacts/.
#
# usage: trace_reader_fuzz.sh SOURCE_DIR BUILD_DIR SECONDS [CUDA_TOOLKIT_ROOT]
# exit: 0 no finding; 1 a finding or a failed build; 77 skipped (no clang++ that links
# -fsanitize=fuzzer here: Debian 12 needs clang and libclang-rt-14-dev).
# UMSWAP_FUZZ_CC / UMSWAP_FUZZ_CXX pick other compilers (default clang / clang++).
set -uo pipefail
src=$1
build=$2
seconds=$3
cuda_root=${4:-}
cc=${UMSWAP_FUZZ_CC:-clang}
cxx=${UMSWAP_FUZZ_CXX:-clang++}

# libFuzzer's own exit codes for a finding are 77 (error) and 70 (timeout); 77 is CTest's skip
# code here, so every finding is mapped to 1 below and only this function exits 77.
skip() {
  echo "umswap-fuzz: skipped: $*"
  exit 77
}

command -v "$cxx" >/dev/null 2>&1 || skip "$cxx not found"
command -v "$cc" >/dev/null 2>&1 || skip "$cc not found"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
  'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>"$probe/err"; then
  skip "$cxx cannot link -fsanitize=fuzzer: $(head -n 1 "$probe/err")"
fi

started=$SECONDS
# -O1 and line tables only: half the compile time of -O2 -g, and still file:line in reports.
configure=(-S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only"
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DUMSWAP_FUZZ=ON -DUMSWAP_NVCC=OFF
  -DUMSWAP_BUILD_TESTS=OFF -DUMSWAP_BUILD_SAMPLES=OFF -DUMSWAP_BUILD_BENCHMARKS=OFF)
[ -n "$cuda_root" ] && configure+=(-DCUDAToolkit_ROOT="$cuda_root")
if ! cmake "${configure[@]}" >"$probe/configure.log" 2>&1; then
  cat "$probe/configure.log"
  echo "umswap-fuzz: FAIL: configuring $build"
  exit 1
fi
if ! cmake --build "$build" --target trace_reader_fuzz trace_fuzz_seeds >"$probe/build.log" 2>&1; then
  tail -n 60 "$probe/build.log"
  echo "umswap-fuzz: FAIL: building the fuzzer"
  exit 1
fi
echo "umswap-fuzz: built in $((SECONDS - started)) s"

# The seeds are rewritten each run (they follow the writer); the corpus the fuzzer grows is kept
# in the build directory, so later local runs start where earlier ones stopped.
seeds=$build/fuzz-seeds
corpus=$build/fuzz-corpus
artifacts=$build/artifacts
rm -rf "$seeds"
mkdir -p "$corpus" "$artifacts"
"$build/bin/trace_fuzz_seeds" "$seeds" || { echo "umswap-fuzz: FAIL: writing seeds"; exit 1; }

log=$build/fuzz.log
ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
  "$build/bin/trace_reader_fuzz" "$corpus" "$seeds" -max_total_time="$seconds" \
  -rss_limit_mb=512 -malloc_limit_mb=256 -timeout=10 \
  -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$artifacts/" -print_final_stats=1 \
  >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  tail -n 80 "$log"
  echo "umswap-fuzz: FAIL: the fuzzer exited $rc; inputs under $artifacts/, full log $log"
  exit 1
fi
grep -E '^(#[0-9]+[[:space:]]+DONE|Done [0-9]+ runs|stat::)' "$log"
echo "umswap-fuzz: no finding in ${seconds} s, corpus $(find "$corpus" -type f | wc -l) inputs" \
  "($(find "$seeds" -type f | wc -l) seeds); total $((SECONDS - started)) s"
