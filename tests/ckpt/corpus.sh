#!/bin/bash
# The attacker's corpus (issue 12): real saker-train checkpoints (1 and 2 ranks, plain and
# encrypted), damaged by tests/ckpt/make-corpus.py in every way it knows; each case is
# verified and resumed under a timeout. Every case must end as either
#   detected: verify calls the newest checkpoint DAMAGED, the resume falls back to an
#             older one, and the run ends with the uninterrupted run's weights hash; or
#   harmless: verify calls it ok, the resume loads it, same hash.
# Never a crash, a hang, another hash, or verify and resume disagreeing.
# Default: a sample of the cases; SAKER_TEST_FULL=1: all of them (--full corpus).
set -u
SRC=${SAKER_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${SAKER_BUILDDIR:-$SRC/build}
RUN=$BUILD/launcher/saker-run/saker-run
TRAIN=$BUILD/launcher/saker-train/saker-train
CKPT=$BUILD/ckpt/saker-ckpt/saker-ckpt
for b in "$RUN" "$TRAIN" "$CKPT"; do [[ -x $b ]] || { echo "corpus: build $b first" >&2; exit 1; }; done
/usr/bin/python3 -c 'import h5py' 2>/dev/null || { echo "corpus: skipped: /usr/bin/python3 lacks h5py (scripts/install-deps)"; exit 77; }
FULL=${SAKER_TEST_FULL:-0}
WORK=$(mktemp -d /tmp/saker-ckpt-corpus.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ARGS="--steps 60 --ckpt-every 20 --layers 8,8 --batch 32 --log-every 100 --keep 0"

"$TRAIN" make-data --out "$WORK/data.h5" --samples 512 --features 8 --classes 3 --seed 2 >/dev/null
head -c 32 /dev/urandom >"$WORK/key" && chmod 600 "$WORK/key"
head -c 32 /dev/urandom >"$WORK/key2" && chmod 600 "$WORK/key2"

# train WORLD CKPT_DIR [EXTRA...]: one saker-train run; its output on stdout.
train() {
  local world=$1 dir=$2
  shift 2
  # shellcheck disable=SC2086
  local seed=5
  [[ $dir == */foreign* ]] && seed=6  # another run: other weights, same steps and world size
  timeout -k 5 120 "$RUN" --local -n "$world" --max-restarts 0 -- \
    "$TRAIN" --data "$WORK/data.h5" $ARGS --seed $seed --ckpt-dir "$dir" "$@" 2>&1
}
hash_of() { sed -n 's/^saker-train: weights xxh3_128 \([0-9a-f]*\)$/\1/p' | tail -n 1; }

declare -A H
mkdir -p "$WORK/sets"
for set in plain1 plain2 enc1 enc2 foreign1 foreign2 foreignenc1 foreignenc2; do
  world=${set: -1}
  extra=()
  [[ $set == enc* ]] && extra=(--ckpt-key "$WORK/key")
  [[ $set == foreignenc* ]] && extra=(--ckpt-key "$WORK/key")
  out=$(train "$world" "$WORK/sets/$set" "${extra[@]}") || { echo "corpus: making set $set failed: $out" >&2; exit 1; }
  [[ $set == foreign* ]] || H[$set]=$(hash_of <<<"$out")
done
echo "corpus: uninterrupted hashes: plain1 ${H[plain1]} plain2 ${H[plain2]} enc1 ${H[enc1]} enc2 ${H[enc2]}"

full_flag=()
[[ $FULL == 1 ]] && full_flag=(--full)
/usr/bin/python3 "$SRC/tests/ckpt/make-corpus.py" "$WORK/sets" "$WORK/cases" "${full_flag[@]}" || exit 1

mapfile -t cases < <(ls "$WORK/cases")
if [[ $FULL != 1 ]]; then
  # A fixed sample of every class: every 4th case (flips, truncations, attribute edits),
  # plus every case of the smaller classes (shards, renames, swaps, encryption markers).
  sample=()
  for i in "${!cases[@]}"; do
    c=${cases[$i]}
    if (( i % 4 == 0 )) || [[ $c != *-flip-* && $c != *-trunc-* && $c != *.attr-* ]]; then sample+=("$c"); fi
  done
  cases=("${sample[@]}")
  echo "corpus: ${#cases[@]} sampled cases (SAKER_TEST_FULL=1 runs all)"
fi

fail=0 detected=0 harmless=0 done_cases=0
for c in "${cases[@]}"; do
  done_cases=$((done_cases + 1))
  (( done_cases % 250 == 0 )) && echo "corpus: $done_cases/${#cases[@]} cases, $fail failed so far" >&2
  set=${c%%.*}
  world=${set: -1}
  dir=$WORK/cases/$c
  key=()
  [[ $set == enc* ]] && key=(--ckpt-key "$WORK/key")
  vkey=()
  [[ $set == enc* ]] && vkey=(--key "$WORK/key")
  # Newest main file by name that verify calls ok: what a resume must load.
  v=$(timeout -k 5 60 "$CKPT" verify "$dir" "${vkey[@]}" 2>&1)
  vrc=$?
  if (( vrc != 0 && vrc != 1 )); then
    echo "FAIL $c: verify exited $vrc (crash or hang?): $v"; fail=$((fail + 1)); continue
  fi
  want=$(sed -n 's/^ok *.*ckpt-0*\([0-9][0-9]*\)\.h5$/\1/p' <<<"$v" | tail -n 1)
  newest=$(ls "$dir" | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.h5$/\1/p' | sort -n | tail -n 1)
  out=$(train "$world" "$dir" "${key[@]}")
  rc=$?
  got=$(sed -n 's/^saker-train: resumed from checkpoint step \([0-9]*\).*/\1/p' <<<"$out" | tail -n 1)
  h=$(hash_of <<<"$out")
  if (( rc != 0 )); then
    echo "FAIL $c: resume exited $rc: $(tail -n 5 <<<"$out")"; fail=$((fail + 1)); continue
  fi
  if [[ $h != "${H[$set]}" ]]; then
    echo "FAIL $c: resumed from step ${got:-none} and ended with hash $h, not ${H[$set]}"; fail=$((fail + 1)); continue
  fi
  # A whole main file of another run is intact in itself (verify cannot know which run the
  # directory holds); the resume refuses it as another run's and falls back further.
  if [[ $c == *main-foreign && ${got:-0} -lt ${want:-0} ]]; then detected=$((detected + 1)); continue; fi
  if [[ ${got:-none} != "${want:-none}" ]]; then
    echo "FAIL $c: verify says step ${want:-none} is the newest intact, the resume loaded ${got:-none}"
    fail=$((fail + 1)); continue
  fi
  if [[ $got == "$newest" ]]; then harmless=$((harmless + 1)); else detected=$((detected + 1)); fi
done
echo "corpus: ${#cases[@]} cases: $detected detected (fell back, same hash), $harmless harmless (same hash), $fail failed"

# All damaged: a distinct refusal naming each file, unless --allow-fresh-start.
all=$WORK/all-damaged
cp -r "$WORK/sets/plain1" "$all"
for f in "$all"/ckpt-*.h5; do printf 'x' | dd of="$f" bs=1 seek=200 conv=notrunc status=none; done
out=$(train 1 "$all")
rc=$?
# saker-run reports the rank's own exit code; saker-train alone exits 79.
if (( rc == 0 )) || ! grep -q "exited with code 79" <<<"$out"; then
  echo "FAIL all-damaged: exit $rc (want 79 naming each file): $out"; fail=$((fail + 1))
fi
for s in 20 40 60; do grep -q "ckpt-0000000000$s.h5" <<<"$out" || { echo "FAIL all-damaged: step $s not named"; fail=$((fail + 1)); }; done
out=$(train 1 "$all" --allow-fresh-start)
rc=$?
[[ $rc == 0 && $(hash_of <<<"$out") == "${H[plain1]}" ]] || { echo "FAIL all-damaged --allow-fresh-start: exit $rc"; fail=$((fail + 1)); }

(( fail == 0 )) || exit 1
echo "corpus: PASS"
