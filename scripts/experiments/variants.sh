# scripts/experiments/variants.sh — sourced by scripts/experiments/stepNN_variants.sh: rebuild one step with some
# lines of its attention.cu changed, and time each variant the same way.
#
#   source scripts/experiments/variants.sh; variants_of STEP_DIR
#   run NAME ['sed expression' ...]
#
# variants_of keeps a copy of STEP_DIR/attention.cu and puts it back when the script
# exits. run applies the sed expressions to a fresh copy (a change that matches nothing
# is an error, so a variant cannot silently time the step as it is), rebuilds the program
# in build-gpu and times it at B=4, H=16, N=4096, bf16, d 64 and 128, causal and not: one
# line each with TFLOP/s, registers, spill bytes, tiles and blocks per SM. VARIANT_N (e.g.
# "4096 16384") and VARIANT_MASKS (e.g. "--causal") time other lengths and masks; with
# VARIANT_N set, each line names its N.

variants_of() {
  variant_step=$1
  variant_file=$variant_step/attention.cu
  variant_orig=$(mktemp)
  cp "$variant_file" "$variant_orig"
  trap 'cp "$variant_orig" "$variant_file"; rm -f "$variant_orig"' EXIT
}

run() {
  local name=$1 d c log="/tmp/${variant_step}_$1.log"
  shift
  cp "$variant_orig" "$variant_file"
  for e in "$@"; do sed -i "$e" "$variant_file"; done
  if [[ $# -gt 0 ]] && cmp -s "$variant_file" "$variant_orig"; then echo "$name: the change did not apply"; return 1; fi
  if ! ninja -C build-gpu "$variant_step" >"$log" 2>&1; then
    echo "$name: build failed"; tail -n 5 "$log"; return 1
  fi
  local n masks=("" --causal) named=${VARIANT_N:+1}
  [[ -n ${VARIANT_MASKS+x} ]] && read -r -a masks <<<"$VARIANT_MASKS"
  for n in ${VARIANT_N:-4096}; do for d in 64 128; do for c in "${masks[@]}"; do
    # shellcheck disable=SC2086
    timeout 60 "build-gpu/bin/$variant_step" --batch 4 --heads 16 --seq-q $n --seq-kv $n \
      --head-dim $d $c --repeat 20 --json |
      python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$name', *(['N', r['seq_q']] if '$named' else []), r['head_dim'], 'causal' if r['causal'] else 'full', round(r['tflops'],1), 'regs', r.get('registers'), 'local', r.get('local_bytes'), 'Br', r.get('B_r'), 'Bc', r.get('B_c'), 'blocks/SM', r.get('blocks_per_sm'))"
  done; done; done
}
