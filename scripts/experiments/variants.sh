# scripts/experiments/variants.sh — sourced by scripts/experiments/stepNN_*.sh: rebuild one
# step with some lines of its attention.cu (or attention.cpp, or the SOURCE named) changed,
# and time each variant the same way.
#
#   source scripts/experiments/variants.sh; variants_of STEP_DIR [SOURCE]
#   run NAME ['sed expression' ...]
#
# The working tree is never edited. variants_of lays out a scratch source tree in
# build-gpu/variants/STEP_DIR/src: a copy of STEP_DIR and links to everything else in
# the repository; it is configured once, with build-gpu's CUDA architectures and build
# type, in build-gpu/variants/STEP_DIR/build. run applies the sed expressions to a fresh
# copy of that file in the scratch tree (a change that matches nothing is an
# error, so a variant cannot silently time the step as it is), rebuilds the copy's
# program and times it at B=4, H=16, N=4096, bf16, d 64 and 128, causal and not: one
# line each with TFLOP/s, registers, spill bytes, tiles and blocks per SM. VARIANT_N
# (e.g. "4096 16384") and VARIANT_MASKS (e.g. "--causal") time other lengths and masks;
# with VARIANT_N set, each line names its N. VARIANT_DIMS (default "64 128") picks the d,
# VARIANT_ARGS adds to the program's arguments (e.g. "--backward --dtype fp32" for a backward
# step, whose lines then give the backward's TFLOP/s and its kernel's resources). Every
# variant is timed by the program's --repeat 20 (a single launch at a time: a quick look,
# alike for all the variants, never beside a baseline timed otherwise). Killing a script
# midway leaves the working tree as it was; the scratch tree is rebuilt from it on the next run.

variants_of() {
  variant_step=${1%/}
  local repo=$PWD scratch=build-gpu/variants/${1%/} e option value options=()
  if [[ ! -f build-gpu/CMakeCache.txt ]]; then
    echo "variants: build-gpu is not configured (e.g. FLASH_ROUND_PHASES=none scripts/gpu/round.sh OUT)" >&2
    return 1
  fi
  variant_src=$scratch/src
  variant_build=$scratch/build
  rm -rf "$variant_src"
  mkdir -p "$variant_src" "$variant_build"
  for e in "$repo"/*; do
    case $(basename "$e") in build* | "$variant_step") continue ;; esac
    ln -s "$e" "$variant_src/$(basename "$e")"
  done
  cp -r "$variant_step" "$variant_src/$variant_step"
  if [[ -n ${2:-} ]]; then
    variant_orig=$variant_step/$2
  else
    variant_orig=$variant_step/attention.cu
    [[ -f $variant_orig ]] || variant_orig=$variant_step/attention.cpp
  fi
  [[ -f $variant_orig ]] || { echo "variants: no $variant_orig" >&2; return 1; }
  variant_file=$variant_src/$variant_orig
  # build-gpu's choices, so that a variant is compiled as the step it is timed against.
  for option in CMAKE_BUILD_TYPE CMAKE_CUDA_ARCHITECTURES FLASH_ENABLE_CUDA; do
    value=$(sed -n "s/^$option:[A-Z]*=//p" build-gpu/CMakeCache.txt)
    [[ -n $value ]] && options+=("-D$option=$value")
  done
  cmake -S "$variant_src" -B "$variant_build" -G Ninja "${options[@]}" -DFLASH_ENABLE_PYTHON=OFF \
    -DBUILD_TESTING=OFF >"$scratch/configure.log" 2>&1 ||
    { echo "variants: configuring the scratch tree failed (see $scratch/configure.log)" >&2; return 1; }
}

run() {
  local name=$1 d c log="$variant_build/$1.log"
  shift
  cp "$variant_orig" "$variant_file"
  for e in "$@"; do sed -i "$e" "$variant_file"; done
  if [[ $# -gt 0 ]] && cmp -s "$variant_file" "$variant_orig"; then echo "$name: the change did not apply"; return 1; fi
  if ! ninja -C "$variant_build" "$variant_step" >"$log" 2>&1; then
    echo "$name: build failed"; tail -n 5 "$log"; return 1
  fi
  local n masks=("" --causal) named=${VARIANT_N:+1}
  [[ -n ${VARIANT_MASKS+x} ]] && read -r -a masks <<<"$VARIANT_MASKS"
  for n in ${VARIANT_N:-4096}; do for d in ${VARIANT_DIMS:-64 128}; do for c in "${masks[@]}"; do
    # shellcheck disable=SC2086
    timeout 60 "$variant_build/bin/$variant_step" --batch 4 --heads 16 --seq-q $n --seq-kv $n \
      --head-dim $d $c ${VARIANT_ARGS:-} --repeat 20 --json | python3 -c "$variant_line" "$name" "$named"
  done; done; done
}

# One line of run's output from a program's JSON on stdin: argv[1] the variant's name,
# argv[2] non-empty to name N; a backward run's figures are its backward's.
variant_line='
import json, sys
r = json.loads(sys.stdin.read())
f = r.get("backward", r)
print(sys.argv[1], *(["N", r["seq_q"]] if sys.argv[2] else []), r["head_dim"], "causal" if r["causal"] else "full",
      round(f["tflops"], 1), "regs", f.get("registers"), "local", f.get("local_bytes"), "Br", f.get("B_r"),
      "Bc", f.get("B_c"), "blocks/SM", f.get("blocks_per_sm"))'

