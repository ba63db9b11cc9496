# Sourced by the saker.torch test scripts: python_for_build PY DIR prints the Python to run
# the ranks with. For a sanitizer build (scripts/check's build-asan/), Python can load the
# extension only with the sanitizer runtimes preloaded, and only into Python (dd and
# friends stay as they are), so it writes a wrapper into DIR and prints that; Python and
# torch keep memory until exit by design, so leak checking is off for them.
python_for_build() {
  local py=$1 dir=$2
  if nm -D --undefined-only "$SAKER_BUILDDIR/python/saker/.libs/_comm.so" 2>/dev/null | grep -q ' __asan_'; then
    printf '#!/bin/sh\nLD_PRELOAD="%s %s" ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" exec %s "$@"\n' \
      "$(gcc -print-file-name=libasan.so)" "$(gcc -print-file-name=libubsan.so)" "$py" >"$dir/python3"
    chmod +x "$dir/python3"
    echo "$dir/python3"
  else
    echo "$py"
  fi
}
