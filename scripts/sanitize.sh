#!/usr/bin/env bash
# The core, the module and the C library built with -fsanitize=address,undefined,
# then the test suite and a fuzz run against them (docs/reliability.md).
#
#   scripts/sanitize.sh                 # the whole suite + a 2-minute fuzz run
#   scripts/sanitize.sh --subset        # the robustness, C API, ggml, arena, threaded-placement, peak-window, deep-search and full-packing tests,
#                                       # 2,000 C API probes + 1 minute of every surface
#   FUZZ_MINUTES=10 scripts/sanitize.sh # a longer fuzz run
#   scripts/sanitize.sh -- -k ggml      # extra pytest arguments after --
#
# Python itself is not instrumented, so libasan is preloaded, with libstdc++
# beside it (without it ASan fails an internal check on every C++ throw), and
# ASAN_OPTIONS lets an allocation fail instead of aborting (a test asks for
# 2^52 bytes on purpose) and skips leak checking (the interpreter's own).
# Any report aborts the process: a failed test, or a "crash" in the fuzz run.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${EMEL_ASAN_BUILD:-build-asan}
SUBSET=0
PYTEST_ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --subset) SUBSET=1 ;;
        --) shift; PYTEST_ARGS=("$@"); break ;;
        *) echo "usage: $0 [--subset] [-- PYTEST_ARGS...]" >&2; exit 2 ;;
    esac
    shift
done
FUZZ_MINUTES=${FUZZ_MINUTES:-$([ "$SUBSET" = 1 ] && echo 1 || echo 2)}

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="$SAN" -DCMAKE_SHARED_LINKER_FLAGS="$SAN" -DCMAKE_MODULE_LINKER_FLAGS="$SAN" \
    -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" > "$BUILD.cmake.log"
ninja -C "$BUILD"

# A scratch copy of the package around the sanitized module.
PKG="$BUILD/python"
rm -rf "$PKG"
cp -r python "$PKG"
rm -f "$PKG"/emel/memory/_core*.so
cp "$BUILD"/_core*.so "$PKG/emel/memory/"

export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PYTHONPATH="$PWD/$PKG"
export EMEL_C_API_BUILD_DIR="$BUILD" EMEL_C_LIBRARY="$PWD/$BUILD/libemel_memory_c.so"
export EMEL_FUZZ_INSTALLED=1  # fuzz/ imports the sanitized copy on PYTHONPATH

if [ "$SUBSET" = 1 ]; then
    TESTS=(tests/test_robustness.py tests/test_c_api.py tests/test_ggml.py tests/test_arenas.py
           tests/test_errors.py tests/test_strategies.py tests/test_greedy_index.py
           tests/test_peak_window.py tests/test_exact_search_scale.py tests/test_full_packing.py)
else
    TESTS=(tests)
fi
echo "== pytest under ASan+UBSan: ${TESTS[*]}"
python3 -m pytest -q -x -p no:cacheprovider "${TESTS[@]}" "${PYTEST_ARGS[@]}"
# The C API probes on their own, so every run of the script (CI's subset too)
# sends a fixed number of out-of-range enum codes and odd arrays through the
# sanitized C library, however few inputs the timed run below gives the surface.
echo "== C API probes under ASan+UBSan: ${CAPI_INPUTS:=2000} inputs"
python3 fuzz/run.py --inputs "$CAPI_INPUTS" --surfaces capi --seed 31 --timeout 60
echo "== fuzz run under ASan+UBSan: $FUZZ_MINUTES minute(s)"
python3 fuzz/run.py --minutes "$FUZZ_MINUTES" --seed 3 --timeout 60
