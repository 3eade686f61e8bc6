# What the GPU scripts share (sourced, with OUT and PART set): the parts chosen, a stamped log line, and the fast
# suite started on the CPU cores beside the GPU parts and collected at the end.
part() { case " $PART " in *" $1 "*) return 0;; *) return 1;; esac; }
stamp() { echo "== $1 $(date -u +%H:%M:%S)" | tee -a "$OUT/log.txt"; }

# start_tests WORKERS SECONDS: xdist spreads the suite over the CPU cores (where installed); each test's own time box
# keeps one hang from stopping the rest; WORKERS and TESTS_S in the environment override the defaults given
start_tests() {
  stamp tests
  if python3 -c "import xdist, pytest_timeout" 2>/dev/null; then par="-n ${WORKERS:-$1} --timeout 240"; else par=""; fi
  ( OMP_NUM_THREADS=1 timeout ${TESTS_S:-$2} python3 -m pytest -q -m "not slow" $par -p no:cacheprovider \
      > "$OUT/tests.txt" 2>&1 || echo "tests exit $?" >> "$OUT/log.txt" ) &
  tests=$!
}

wait_tests() {
  if [ -n "${tests:-}" ]; then
    wait "$tests"
    tail -15 "$OUT/tests.txt" >> "$OUT/log.txt"
  fi
}
