#!/usr/bin/env bash
# kiln-run command tests, one case per ctest entry:
#   kiln-run-tests.sh CASE KILN_RUN KILN_TEST_FILES
# Each case builds its fixtures with kiln-test-files in a fresh directory and
# checks the exit code and the exact error line (stderr must be one line).
set -uo pipefail
case_name=$1 kiln_run=$2 test_files=$3
kiln_dataset="$(cd "$(dirname "$0")/../.." && pwd)/scripts/kiln_dataset.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL [$case_name]: $*" >&2; exit 1; }

# expect RC LINE CMD...: runs CMD; exit code RC and stderr exactly LINE
# ("" = empty stderr).
expect() {
  local rc=$1 line=$2; shift 2
  "$@" >out.txt 2>err.txt
  local got=$?
  cat out.txt err.txt
  [ "$got" = "$rc" ] || fail "$* exited $got, expected $rc"
  if [ -z "$line" ]; then
    [ ! -s err.txt ] || fail "$* wrote to stderr"
  else
    [ "$(wc -l <err.txt)" = 1 ] || fail "$* wrote $(wc -l <err.txt) stderr lines, expected 1"
    [ "$(cat err.txt)" = "$line" ] || fail "stderr is '$(cat err.txt)', expected '$line'"
  fi
}
fixtures() {
  "$test_files" artifact a.kiln && "$test_files" weights w.safetensors &&
    "$test_files" tokens t.bin 5000 || fail "fixtures"
}
train() { "$kiln_run" train a.kiln --data t.bin --steps 10 --batch 2 --seq 16 "$@"; }
size() { stat -c %s "$1"; }

case $case_name in
inspect)
  fixtures
  expect 0 "" "$kiln_run" inspect a.kiln
  grep -q '^a.kiln: Kiln artifact, format 1, [0-9]* bytes, CRC-32C 0x[0-9a-f]\{8\}$' out.txt || fail "header line"
  grep -q '^  8 <= seq <= 1024  (--dynamic seq=8..1024:8)$' out.txt || fail "guards"
  grep -q '^  embed  F32 \[10, 4\]  frozen  <- model.embed_tokens.weight$' out.txt || fail "params"
  grep -q '^  add: compute_75.ptx, source$' out.txt || fail "kernels"
  grep -q '"vocab_size": 1000' out.txt || fail "meta"
  grep -q '^memory plan at batch=64, seq=1024: 192 bytes persistent + 0 arena (0 buffers) + 33554432 workspace$' out.txt || fail "memory plan"
  grep -q '^buckets: none$' out.txt || fail "buckets"
  expect 2 "kiln-run: error: 'inspect' takes one artifact file" "$kiln_run" inspect
  expect 1 "kiln-run: error: none.kiln: No such file or directory" "$kiln_run" inspect none.kiln
  ;;
train-data-parallel)
  # The launcher (--gpus N), with a fake rank ($KILN_RUN_LAUNCH_EXEC): its
  # environment and arguments, a failing rank stopping the others, a rank
  # that ignores the failure killed after the grace period.
  fixtures
  cat >rank.sh <<'SH'
#!/usr/bin/env bash
echo "RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE NVLS=$NCCL_NVLS_ENABLE ARGS=$*" >"env-$RANK.txt"
echo "$KILN_RENDEZVOUS" >rendezvous.txt
case "$FAKE_MODE" in
  fail) if [ "$RANK" = 1 ]; then sleep 0.2; exit 3; fi
        # Like a real rank: stop when the failure marker appears.
        for _ in $(seq 100); do [ -e "$KILN_RENDEZVOUS/failed" ] && exit 6; sleep 0.05; done
        exit 0 ;;
  hang) if [ "$RANK" = 1 ]; then exit 3; fi; exec sleep 60 ;;
esac
exit 0
SH
  chmod +x rank.sh
  export KILN_RUN_LAUNCH_EXEC=$PWD/rank.sh
  FAKE_MODE=ok expect 0 "" train --gpus 2 --init random:1
  grep -qx "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 NVLS=0 ARGS=train a.kiln --data t.bin --steps 10 --batch 2 --seq 16 --init random:1" env-0.txt || fail "rank 0 env: $(cat env-0.txt)"
  grep -q "^RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 " env-1.txt || fail "rank 1 env"
  [ ! -e "$(cat rendezvous.txt)" ] || fail "the temporary rendezvous directory was left"
  NCCL_NVLS_ENABLE=1 FAKE_MODE=ok expect 0 "" train --gpus 1 --init random:1
  grep -q "NVLS=1 " env-0.txt || fail "the user's NCCL_NVLS_ENABLE was overridden"
  FAKE_MODE=fail expect 3 "kiln-run: error: rank 1 of 3 failed (exit status 3); stopped the other ranks" \
    train --gpus 3 --init random:1
  mkdir rdzv
  FAKE_MODE=hang KILN_RUN_STOP_GRACE=0.5 expect 3 \
    "kiln-run: error: rank 1 of 2 failed (exit status 3); stopped the other ranks (killed after 0.5 s)" \
    train --gpus 2 --init random:1 --rendezvous rdzv
  grep -qx "rank 1: exit status 3" rdzv/failed || fail "failure marker: $(cat rdzv/failed)"
  expect 2 "kiln-run: error: --rendezvous: rendezvous rdzv holds 'failed' of an earlier run; give each run an empty directory" \
    train --gpus 2 --init random:1 --rendezvous rdzv
  unset KILN_RUN_LAUNCH_EXEC
  # Flags and the environment.
  expect 2 "kiln-run: error: --gpus needs an integer >= 1, got '0'" train --gpus 0 --init random:1
  expect 2 "kiln-run: error: --gpus N uses GPUs 0..N-1; leave out --device (or set CUDA_VISIBLE_DEVICES)" \
    train --gpus 2 --device 1 --init random:1
  expect 2 "kiln-run: error: --rendezvous needs --gpus N or RANK/WORLD_SIZE" train --rendezvous . --init random:1
  expect 2 "kiln-run: error: --grad-accum and --eval-data do not run data-parallel yet; compile the accumulation in (kiln compile --data-parallel --grad-accum=N)" \
    train --gpus 2 --grad-accum 2 --init random:1
  printf '%s\n' '{"input_ids": [1, 2, 3, 4, 5]}' >d.jsonl
  python3 "$kiln_dataset" d.jsonl -o d.kdocs >/dev/null || fail "converter"
  expect 2 "kiln-run: error: --data d.kdocs is a fine-tuning dataset; data-parallel runs read raw token files only (a dataset's micro-batches are not sharded over the ranks yet)" \
    "$kiln_run" train a.kiln --data d.kdocs --steps 1 --batch 2 --seq 16 --init random:1 --gpus 2
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 expect 2 \
    "kiln-run: error: --gpus starts its own ranks; under RANK/WORLD_SIZE (torchrun) leave it out: each process is one rank" \
    train --gpus 2 --init random:1
  RANK=x WORLD_SIZE=2 expect 2 "kiln-run: error: RANK='x' is not an integer in [0, WORLD_SIZE=2)" \
    train --init random:1
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 expect 2 \
    "kiln-run: error: rank 0: RANK/WORLD_SIZE are set but there is no rendezvous directory: pass --rendezvous DIR (one every rank sees, empty) or set KILN_RENDEZVOUS" \
    train --init random:1
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 expect 2 \
    "kiln-run: error: rank 0: a.kiln was compiled without --data-parallel: its gradients would not be averaged over the ranks (kiln compile --data-parallel)" \
    train --init random:1
  # Two ranks started by hand (as torchrun would) on different artifacts:
  # both stop at the rendezvous with the same line, naming both ranks.
  "$test_files" artifact dp.kiln --data-parallel && "$test_files" artifact dp80.kiln --data-parallel --cubin-only sm_80 || fail "fixtures"
  mkdir meet
  RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 "$kiln_run" train dp80.kiln --data t.bin --steps 10 --batch 2 --seq 16 \
    --init random:1 --rendezvous meet 2>err1.txt &
  other=$!
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 "$kiln_run" train dp.kiln --data t.bin --steps 10 --batch 2 --seq 16 \
    --init random:1 --rendezvous meet >out0.txt 2>err0.txt
  rc0=$?
  wait $other
  rc1=$?
  cat err0.txt err1.txt
  [ "$rc0" = 1 ] && [ "$rc1" = 1 ] || fail "mismatched ranks exited $rc0 and $rc1, expected 1"
  [ "$(wc -l <err0.txt)" = 1 ] && [ "$(wc -l <err1.txt)" = 1 ] || fail "more than one error line"
  pattern='rank 0 runs dp.kiln (crc32c:[0-9a-f]\{8\} bytes:[0-9]*) but rank 1 runs dp80.kiln (crc32c:[0-9a-f]\{8\} bytes:[0-9]*): every rank needs the same artifact$'
  grep -q "^kiln-run: error: rank 0: $pattern" err0.txt || fail "rank 0's line"
  grep -q "^kiln-run: error: rank 1: $pattern" err1.txt || fail "rank 1's line"
  # A compiled-style data-parallel step (all_reduce ops) passes every check
  # up to the device: here, where there is no driver, that is the end.
  "$test_files" gemm-step gdp --data-parallel || fail "fixtures"
  "$kiln_run" inspect gdp.kiln >/dev/null || fail "inspect of the data-parallel step"
  if ! "$kiln_run" devices >/dev/null 2>&1; then
    mkdir solo
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 expect 3 \
      "kiln-run: error: rank 0: no CUDA driver found (libcuda.so.1: cannot open shared object file: No such file or directory); kiln-run needs an NVIDIA GPU and driver; nothing was trained" \
      "$kiln_run" train gdp.kiln --weights gdp.safetensors --input x=gdp.x.bin --steps 2 --batch 2 --seq 3 --rendezvous solo
  fi
  ;;
train-data-parallel-gpu)
  # The NCCL path on the GPU (a communicator of one is a real one; the
  # all-reduces run on their own stream inside the CUDA graph): the same
  # known losses as without it, graphs on and off; with two GPUs, two ranks
  # fed the same input average to the same values.
  nccl_path=$(dirname "$0")/../../scripts/nccl-path.sh
  [ -f "$nccl_path" ] && . "$nccl_path"
  "$test_files" gemm-step gdp --data-parallel || fail "fixture"
  run() { "$kiln_run" train gdp.kiln --weights gdp.safetensors --input x=gdp.x.bin --steps 2 --batch 2 --seq 3 --log-every 1 "$@" >out.txt 2>err.txt; }
  losses() {
    cat out.txt err.txt
    grep -q '^step 1 loss 4.0000000 step_ms' out.txt || fail "$1: step 1 loss"
    grep -q '^step 2 loss 376.0000000 step_ms' out.txt || fail "$1: step 2 loss"
  }
  run || fail "plain run exited $?"; losses plain
  run --gpus 1 || fail "--gpus 1 exited $?"; losses "--gpus 1"
  grep -q '^nccl: 2\.[0-9]*\.[0-9]* (.*), rank 0 of 1 on device 0, NCCL_NVLS_ENABLE=0$' out.txt || fail "nccl line"
  grep -q '^cuda graphs: 1 captured, 1 instantiated' out.txt || fail "graph capture with NCCL"
  grep -q '^peak_mem per GPU: rank 0 [0-9.]* GiB$' out.txt || fail "peak memory per GPU"
  run --gpus 1 --graphs off || fail "--gpus 1 --graphs off exited $?"; losses "--graphs off"
  gpus=$("$kiln_run" devices | grep -c '^device ')
  if [ "$gpus" -ge 2 ]; then
    run --gpus 2 || fail "--gpus 2 exited $?"; losses "--gpus 2"
    grep -q 'rank 0 of 2' out.txt || fail "two ranks"
  fi
  ;;
inspect-kernels)
  # Each distinct kernel once, with its module and launches over step + init.
  "$test_files" launch-step l.kiln || fail "fixtures"
  expect 0 "" "$kiln_run" inspect l.kiln
  grep -q '^kernel modules (2):$' out.txt || fail "modules"
  grep -q '^  kiln_fa90: source$' out.txt || fail "kiln_fa90 module"
  grep -q '^    kiln_fa90_bwd_bf16_d64$' out.txt || fail "kiln_fa90 entry after launch bounds"
  grep -q '^    kiln_fa90_bwd_finish_bf16$' out.txt || fail "kiln_fa90 entry"
  grep -q '^kernels (2 distinct, 5 launches):$' out.txt || fail "kernels header"
  grep -q '^  main_k0_silu  module0  4 launches$' out.txt || fail "shared kernel"
  grep -q '^  main_k1_exp  module0  1 launch$' out.txt || fail "single kernel"
  grep -q '^gemms in the step program (0, 0 with beta = 1):$' out.txt || fail "no gemms"
  # The gemm-only step launches no kernel.
  "$test_files" gemm-step g || fail "fixtures"
  expect 0 "" "$kiln_run" inspect g.kiln
  grep -q '^kernels (0 distinct, 0 launches):$' out.txt || fail "no kernels"
  # Its GEMMs by signature, at the memory plan's sizes (batch=2, seq=3).
  grep -q '^gemms in the step program (3, 0 with beta = 1):$' out.txt || fail "gemms header"
  grep -q '^     1  batch x 2 x seq  (2x2x3)$' out.txt || fail "gemm signature"
  grep -q '^     1  2 x batch x seq, trans_a, trans_b  (2x2x3)$' out.txt || fail "gemm transposes"
  grep -q '^     1  seq x 2 x batch, trans_a  (3x2x2)$' out.txt || fail "gemm sizes"
  ;;
inspect-memory-plan)
  # A malformed memory_plan is one line naming the section and the field.
  "$test_files" artifact a.kiln --bad-memory-plan || fail "fixture"
  expect 1 "kiln-run: error: a.kiln: section 'memory_plan': buffers entry 0: 'base' 3 is not a buffer listed before it" "$kiln_run" inspect a.kiln
  ;;
inspect-damaged)
  # Sections damaged behind valid checksums (kiln-test-files set-section,
  # reseal): each is refused by inspect and train with one line naming the
  # artifact and the part, before any device work.
  "$test_files" gemm-step g || fail "fixture"
  plan=$("$test_files" get-section g.kiln memory_plan)
  damaged() { # SECTION TEXT LINE: set the section, expect LINE from inspect
    "$test_files" gemm-step g && "$test_files" set-section g.kiln "$1" "$2" || fail "set-section $1"
    expect 1 "kiln-run: error: g.kiln: $3" "$kiln_run" inspect g.kiln
  }
  damaged step garbage "section 'step': invalid JSON at byte 0: unexpected character"
  damaged meta "$(printf '{"format":"kiln-step","creator":"\xff","symbols":["batch","seq"]}')" \
    "meta: invalid JSON at byte 33: invalid UTF-8 in string"
  damaged meta '{"symbols":["batch","seq"]}' 'meta "format" is missing, not "kiln-step" (not a kiln compile step artifact)'
  damaged meta '{"format":"pt","symbols":["batch","seq"]}' "meta \"format\" is 'pt', not \"kiln-step\" (not a kiln compile step artifact)"
  damaged meta '{"format":"kiln-step","symbols":["batch","seq","batch"]}' "meta \"symbols\" lists 'batch' twice"
  damaged meta '{"format":"kiln-step","symbols":["batch",""]}' "meta \"symbols\" entry 1 '' is not a size symbol name"
  damaged params '[{"name":"w","dtype":"F32","shape":[3,2],"trainable":true},{"name":"w","dtype":"F32","shape":[3,2]}]' \
    "params[1]: parameter 'w' is listed twice"
  damaged params '[{"name":"w","dtype":"F32","shape":[3,2],"trainable":"yes"}]' "params[0]: 'trainable' must be true or false"
  damaged params '[{"name":"w","dtype":"F32","shape":[4611686018427387904,3],"trainable":true}]' \
    "params[0]: F32 [4611686018427387904, 3] holds more bytes than int64 counts"
  damaged params '[]' "section 'step': args entry 1: parameter 'w' is not in \"params\""
  damaged guards '[{"kind":"range","expr":"len","min":1,"max":8}]' \
    "guards[0]: size expression 'len' uses 'len', which is not in meta \"symbols\""
  damaged memory_plan "${plan/\"arena_bytes\":768/\"arena_bytes\":9223372036854775807}" \
    "section 'memory_plan': 'arena_bytes' is 9223372036854775807, but its buffers take 768 at planned_at"
  damaged memory_plan "${plan/\"alignment\":256/\"alignment\":4611686018427387904}" \
    "section 'memory_plan': 'alignment' 4611686018427387904 is outside 256..1048576"
  damaged memory_plan "${plan/8\*seq/8*len}" \
    "section 'memory_plan': buffers entry 2: size expression '8*len' uses 'len', which is not in meta \"symbols\""
  # A damaged guard is the artifact's fault (exit 1), not the sizes' (exit 4).
  expect 1 "kiln-run: error: g.kiln: section 'memory_plan': buffers entry 2: size expression '8*len' uses 'len', which is not in meta \"symbols\"" \
    "$kiln_run" train g.kiln --weights g.safetensors --input x=g.x.bin --steps 1 --batch 2 --seq 3
  "$test_files" gemm-step g && "$test_files" set-section g.kiln guards '[{"kind":"range","expr":"len","min":1,"max":8}]'
  expect 1 "kiln-run: error: g.kiln: guards[0]: size expression 'len' uses 'len', which is not in meta \"symbols\"" \
    "$kiln_run" train g.kiln --weights g.safetensors --input x=g.x.bin --steps 1 --batch 2 --seq 3
  # The container: a non-zero reserved field and a NUL in a section name
  # (entry 0 starts at byte 40: offset, size, crc, name length, reserved,
  # name).
  "$test_files" gemm-step g && "$test_files" poke g.kiln 62 1 && "$test_files" reseal g.kiln
  expect 1 "kiln-run: error: g.kiln: corrupt Kiln artifact: section table entry 0: reserved field is 1, not 0" "$kiln_run" inspect g.kiln
  "$test_files" gemm-step g && "$test_files" poke g.kiln 65 0 && "$test_files" reseal g.kiln
  expect 1 "kiln-run: error: g.kiln: corrupt Kiln artifact: section table entry 0: the name contains a NUL byte" "$kiln_run" inspect g.kiln
  ;;
inspect-truncated)
  fixtures
  n=$(size a.kiln)
  "$test_files" truncate a.kiln 1000
  expect 1 "kiln-run: error: a.kiln: truncated Kiln artifact (1000 of $n bytes)" "$kiln_run" inspect a.kiln
  "$test_files" truncate a.kiln 20
  expect 1 "kiln-run: error: a.kiln: truncated Kiln artifact (20 bytes; the header and trailer alone take 48)" "$kiln_run" inspect a.kiln
  ;;
inspect-bitflip)
  fixtures
  # A bit in the "notes" payload (its offset from inspect), then one in the
  # header.
  step_offset=$("$kiln_run" inspect a.kiln | awk '$4 == "notes" {print $1}')
  [ -n "$step_offset" ] || fail "no notes section"
  "$test_files" flip a.kiln $((step_offset + 5)) 3
  expect 1 "kiln-run: error: a.kiln: corrupt Kiln artifact: section 'notes' checksum mismatch" "$kiln_run" inspect a.kiln
  "$test_files" artifact a.kiln && "$test_files" flip a.kiln 17 0
  expect 1 "kiln-run: error: a.kiln: corrupt Kiln artifact: header checksum mismatch" "$kiln_run" inspect a.kiln
  "$test_files" artifact a.kiln && "$test_files" flip a.kiln 8 1
  expect 1 "kiln-run: error: a.kiln: Kiln artifact format version 3; this build reads version 1 (recompile the model with a matching kiln)" "$kiln_run" inspect a.kiln
  # A train run rejects it the same way, before anything else.
  "$test_files" artifact a.kiln
  params_offset=$("$kiln_run" inspect a.kiln | awk '$4 == "params" {print $1}')
  "$test_files" flip a.kiln $((params_offset + 20)) 7
  expect 1 "kiln-run: error: a.kiln: corrupt Kiln artifact: section 'params' checksum mismatch" train --weights w.safetensors
  ;;
inspect-garbage)
  head -c 3000 /dev/urandom >a.kiln
  printf 'KILNART\0' | cat - a.kiln >b.kiln
  expect 1 "kiln-run: error: a.kiln: not a Kiln artifact (bad magic)" "$kiln_run" inspect a.kiln
  v=$(od -An -tu4 -j8 -N4 b.kiln | tr -d ' ')
  [ "$v" = 1 ] || expect 1 "kiln-run: error: b.kiln: Kiln artifact format version $v; this build reads version 1 (recompile the model with a matching kiln)" "$kiln_run" inspect b.kiln
  ;;
ckpt-info)
  fixtures
  expect 0 "" "$kiln_run" ckpt-info w.safetensors
  grep -q '^w.safetensors: safetensors, 2 tensors, [0-9]* bytes, CRC-32C checksums verified$' out.txt || fail "summary"
  grep -q '^  model.embed_tokens.weight  F32 \[10, 4\]$' out.txt || fail "tensor line"
  ;;
ckpt-truncated)
  fixtures
  n=$(size w.safetensors)
  "$test_files" truncate w.safetensors $((n - 1))
  expect 1 "kiln-run: error: w.safetensors: truncated safetensors file: tensor 'unused' needs data bytes [160, 172), but the file holds only 171" "$kiln_run" ckpt-info w.safetensors
  "$test_files" truncate w.safetensors 100
  expect 1 "kiln-run: error: w.safetensors: truncated safetensors file (header of 264 bytes, but only 92 bytes follow the length)" "$kiln_run" ckpt-info w.safetensors
  "$test_files" truncate w.safetensors 3
  expect 1 "kiln-run: error: w.safetensors: truncated safetensors file (3 bytes; the header length alone takes 8)" "$kiln_run" ckpt-info w.safetensors
  ;;
ckpt-bitflip)
  fixtures
  n=$(size w.safetensors)
  "$test_files" flip w.safetensors $((n - 20)) 2
  expect 1 "kiln-run: error: w.safetensors: tensor 'model.embed_tokens.weight' fails its CRC-32C check (file corrupt)" "$kiln_run" ckpt-info w.safetensors
  # The same damage stops a training run that loads the file as weights.
  expect 1 "kiln-run: error: w.safetensors: tensor 'model.embed_tokens.weight' fails its CRC-32C check (file corrupt)" train --weights w.safetensors
  ;;
ckpt-garbage)
  head -c 5000 /dev/zero | tr '\0' 'x' >g.safetensors
  expect 1 "kiln-run: error: g.safetensors: not a safetensors file (header length 8680820740569200760)" "$kiln_run" ckpt-info g.safetensors
  printf '\x05\0\0\0\0\0\0\0{"a":' >h.safetensors
  expect 1 "kiln-run: error: h.safetensors: bad safetensors header: invalid JSON at byte 5: unexpected end of input" "$kiln_run" ckpt-info h.safetensors
  ;;
train-usage)
  fixtures
  expect 0 "" "$kiln_run" train --help
  # --seed seeds more than the data order.
  tr '\n' ' ' <out.txt | grep -q -- '--seed S  *seed of the data order, of the init program  *(LoRA.s A matrices) and of dropout (default 0);' ||
    fail "--seed help"
  expect 2 "kiln-run: error: missing --data (see 'kiln-run train --help')" "$kiln_run" train a.kiln --steps 1 --batch 2 --seq 16 --weights w.safetensors
  # Every missing or conflicting flag at once, in one line.
  expect 2 "kiln-run: error: 4 problems with the flags: missing --data; missing --batch; missing --seq; no weights: pass --weights FILE or --init random:SEED (see 'kiln-run train --help')" "$kiln_run" train a.kiln --steps 1
  expect 2 "kiln-run: error: 6 problems with the flags: --steps needs an integer >= 0, got '-1'; --lr needs a positive number, got 'fast'; --init and --weights exclude each other; --lr-schedule must be constant, linear or cosine, got 'step'; --eval-every needs --eval-data (the held-out data); --save-every needs --save (the checkpoint name the periodic ones are named after) (see 'kiln-run train --help')" train --steps -1 --lr fast --init random:1 --weights w.safetensors --lr-schedule step --eval-every 5 --save-every 10
  expect 2 "kiln-run: error: --keep-last needs --save-every (it rotates the periodic checkpoints)" train --init random:1 --keep-last 2
  expect 2 "kiln-run: error: --min-lr-ratio needs --lr-schedule linear or cosine (a constant schedule does not decay)" train --init random:1 --min-lr-ratio 0.1
  expect 2 "kiln-run: error: --min-lr-ratio needs a number from 0 to 1, got '2'" train --init random:1 --lr-schedule cosine --min-lr-ratio 2
  expect 2 "kiln-run: error: --grad-accum needs an integer >= 1, got '0'" train --init random:1 --grad-accum 0
  expect 2 "kiln-run: error: --profile times the fused step; it does not run with --grad-accum 4" train --init random:1 --grad-accum 4 --profile p.tsv
  expect 2 "kiln-run: error: --eval-data needs --eval-every (how many steps apart to evaluate)" train --init random:1 --eval-data t.bin
  expect 2 "kiln-run: error: --grad-accum and --eval-data need the loop programs, which a.kiln lacks (compile with kiln compile --emit=artifact --loop-programs)" train --init random:1 --grad-accum 2 --eval-data t.bin --eval-every 2
  expect 2 "kiln-run: error: --log-file no/dir/log.jsonl: cannot write there (directory 'no/dir' is missing or read-only)" train --init random:1 --log-file no/dir/log.jsonl
  expect 2 "kiln-run: error: --steps needs an integer >= 0, got '-1'" train --steps -1 --weights w.safetensors
  expect 2 "kiln-run: error: unknown option '--stepz' (see 'kiln-run train --help')" train --stepz 3
  expect 2 "kiln-run: error: no weights: pass --weights FILE or --init random:SEED" train
  expect 2 "kiln-run: error: --init must be random:SEED, got 'zeros'" train --init zeros
  expect 2 "kiln-run: error: --init and --weights exclude each other" train --init random:1 --weights w.safetensors
  expect 2 "kiln-run: error: --token-dtype must be uint16 or uint32, got 'int8'" train --init random:1 --token-dtype int8
  expect 2 "kiln-run: error: --save no/dir/ckpt.safetensors: cannot write there (directory 'no/dir' is missing or read-only)" train --init random:1 --save no/dir/ckpt.safetensors
  expect 2 "kiln-run: error: option '--save' needs a value (see 'kiln-run train --help')" train --init random:1 --save
  # Several shapes: comma lists, zipped (a list of one repeats).
  expect 2 "kiln-run: error: --seq needs positive integers (comma-separated), got '8,,16'" train --init random:1 --seq 8,,16
  expect 2 "kiln-run: error: --batch needs positive integers (comma-separated), got '2,0'" train --init random:1 --batch 2,0
  expect 2 "kiln-run: error: --batch and --seq lists differ in length (2 and 3); give one value or the same count" train --init random:1 --batch 1,2 --seq 8,16,24
  expect 2 "kiln-run: error: --input feeds one shape; give one --batch and --seq with it" train --init random:1 --seq 8,16 --input x=t.bin
  expect 2 "kiln-run: error: --graph-cache needs an integer >= 1, got '0'" train --init random:1 --graph-cache 0
  expect 2 "kiln-run: error: --progress must be on, off or auto, got 'yes'" train --init random:1 --progress yes
  expect 2 "kiln-run: error: --attention must be auto, kernels, cudnn or sm90, got 'fa3'" train --init random:1 --attention fa3
  ;;
train-outputs)
  # --save, --save-adapters and --profile replace only regular files, and
  # are refused before anything loads (the commands time out if one blocks).
  fixtures
  mkdir ckdir ad-file-inside && mkdir ad-file-inside/adapter_config.json && mkfifo fifo
  t() { timeout 20 "$kiln_run" train a.kiln --data t.bin --steps 10 --batch 2 --seq 16 --weights w.safetensors "$@"; }
  expect 2 "kiln-run: error: --save ckdir: not a regular file (a directory); refusing to replace it" t --save ckdir
  expect 2 "kiln-run: error: --save /dev/null: not a regular file (a character device); refusing to replace it" t --save /dev/null
  expect 2 "kiln-run: error: --save fifo: not a regular file (a FIFO); refusing to replace it" t --save fifo
  expect 2 "kiln-run: error: --profile fifo: not a regular file (a FIFO); refusing to replace it" t --profile fifo
  expect 2 "kiln-run: error: --profile ckdir: not a regular file (a directory); refusing to replace it" t --profile ckdir
  expect 2 "kiln-run: error: --save-adapters w.safetensors: exists and is not a directory (PEFT adapters are a directory)" t --save-adapters w.safetensors
  expect 2 "kiln-run: error: --save-adapters ad-file-inside/adapter_config.json: not a regular file (a directory); refusing to replace it" t --save-adapters ad-file-inside/
  [ -p fifo ] && [ -d ckdir ] && [ -c /dev/null ] || fail "a refused target was replaced"
  ;;
special-inputs)
  # A FIFO, a directory or a device given as an input file fails at once
  # with one line instead of blocking on open (each command times out if it
  # hangs).
  fixtures
  mkfifo fifo && mkdir dir
  expect 1 "kiln-run: error: fifo: not a regular file (a FIFO)" timeout 20 "$kiln_run" inspect fifo
  expect 1 "kiln-run: error: dir: not a regular file (a directory)" timeout 20 "$kiln_run" inspect dir
  expect 1 "kiln-run: error: fifo: not a regular file (a FIFO)" timeout 20 "$kiln_run" ckpt-info fifo
  expect 1 "kiln-run: error: /dev/zero: not a regular file (a character device)" timeout 20 "$kiln_run" ckpt-info /dev/zero
  expect 1 "kiln-run: error: fifo: not a regular file (a FIFO)" timeout 20 "$kiln_run" train fifo --data t.bin --steps 1 --batch 2 --seq 16 --weights w.safetensors
  expect 1 "kiln-run: error: fifo: not a regular file (a FIFO)" timeout 20 "$kiln_run" train a.kiln --data t.bin --steps 1 --batch 2 --seq 16 --weights fifo
  expect 1 "kiln-run: error: fifo: not a regular file (a FIFO)" timeout 20 "$kiln_run" train a.kiln --data t.bin --steps 1 --batch 2 --seq 16 --weights w.safetensors --resume fifo
  expect 1 "kiln-run: error: fifo: not a regular file (a FIFO)" timeout 20 "$kiln_run" train a.kiln --data fifo --steps 1 --batch 2 --seq 16 --weights w.safetensors
  ;;
train-guard)
  fixtures
  expect 4 "kiln-run: error: --batch/--seq: seq=12 violates seq % 8 == 0 (required by --dynamic seq=8..1024:8)" train --weights w.safetensors --seq 12
  expect 4 "kiln-run: error: --batch/--seq: batch=65 violates 1 <= batch <= 64 (required by --dynamic batch=1..64)" train --weights w.safetensors --batch 65
  # Every shape of a list is checked before anything loads.
  expect 4 "kiln-run: error: --batch/--seq (batch=2,seq=12): seq=12 violates seq % 8 == 0 (required by --dynamic seq=8..1024:8)" train --weights w.safetensors --seq 16,12
  ;;
train-weights)
  fixtures
  "$test_files" weights wrong.safetensors --wrong-shape
  expect 1 "kiln-run: error: wrong.safetensors: weight 'model.embed_tokens.weight' is F32 [4, 10], but the artifact expects F32 [10, 4]" train --weights wrong.safetensors
  "$test_files" weights missing.safetensors --missing
  expect 1 "kiln-run: error: missing.safetensors: missing weight 'model.embed_tokens.weight' (parameter 'embed', expected F32 [10, 4])" train --weights missing.safetensors
  ;;
train-resume)
  fixtures
  "$test_files" resume ckpt.safetensors --step 7 || fail "fixture"
  train --weights w.safetensors --resume ckpt.safetensors >out.txt 2>err.txt
  cat out.txt err.txt
  grep -q '^resume ckpt.safetensors: step 7$' out.txt || fail "resume line"
  grep -q '^kiln-run: error: the artifact has no step program' err.txt || fail "no-step-program line"
  expect 1 "kiln-run: error: w.safetensors: not a kiln-run checkpoint (no integer metadata 'kiln.step')" train --weights w.safetensors --resume w.safetensors
  # A checkpoint without the optimizer state the step reads is refused,
  # naming the tensor; with it, validation passes (to the device).
  "$test_files" gemm-step g --with-state && "$test_files" gemm-resume ok.safetensors &&
    "$test_files" gemm-resume nostate.safetensors --drop-state || fail "fixture"
  g() { "$kiln_run" train g.kiln --weights g.safetensors --input x=g.x.bin --steps 1 --batch 2 --seq 3 "$@"; }
  expect 1 "kiln-run: error: nostate.safetensors: checkpoint lacks optimizer state 'state/w/momentum' (expected F32 [3, 2]); it was not saved for this step" g --resume nostate.safetensors
  g --resume ok.safetensors >out.txt 2>err.txt
  cat out.txt err.txt
  grep -q '^resume ok.safetensors: step 2$' out.txt || fail "complete checkpoint not accepted"
  ;;
train-data)
  fixtures
  "$test_files" tokens short.bin 10
  expect 1 "kiln-run: error: short.bin: 10 tokens, but one training window needs seq+1 = 17" train --weights w.safetensors --data short.bin
  "$test_files" tokens big.bin 5000 --max 5000
  expect 1 "kiln-run: error: big.bin: token 3853 at position 692 is outside the vocabulary (1000 ids)" train --weights w.safetensors --data big.bin
  head -c 1001 t.bin >odd.bin
  expect 1 "kiln-run: error: odd.bin: 1001 bytes is not a whole number of uint16 tokens (truncated, or the wrong --token-dtype?)" train --weights w.safetensors --data odd.bin
  ;;
train-dataset)
  # Fine-tuning datasets (docs/data.md) are validated before any device
  # work; the artifact has no step program, so a valid run stops at exit 5.
  fixtures
  printf '%s\n' '{"input_ids": [1, 2, 3, 4, 5], "labels": [-100, -100, 3, 4, 5]}' \
    '{"input_ids": [6, 7, 8]}' >d.jsonl
  python3 "$kiln_dataset" d.jsonl -o d.kdocs >/dev/null || fail "converter"
  train --weights w.safetensors --data d.kdocs >out.txt 2>err.txt; rc=$?
  cat out.txt err.txt
  [ $rc = 5 ] || fail "exit $rc, expected 5"
  grep -q '^data d.kdocs: 2 documents, 8 tokens (6 with loss), 2 padded rows per micro-batch, seq 16, shuffled (seed 0)$' out.txt ||
    fail "dataset summary"
  # A token id past the artifact's vocabulary (1000), with its place.
  printf '%s\n' '{"input_ids": [1, 2, 3]}' '{"input_ids": [4, 2000, 5]}' >big.jsonl
  python3 "$kiln_dataset" big.jsonl -o big.kdocs >/dev/null || fail "converter"
  expect 1 "kiln-run: error: big.kdocs: document 1 position 1: token 2000 is outside the vocabulary (1000 ids)" train --weights w.safetensors --data big.kdocs
  # Truncated, a wrong dtype code, a raw token flag on a dataset.
  head -c -3 d.kdocs >cut.kdocs
  expect 1 "kiln-run: error: cut.kdocs: 118 bytes, but 2 documents of 8 uint16 tokens need 121 (truncated)" train --weights w.safetensors --data cut.kdocs
  cp d.kdocs dtype.kdocs && printf '\x07' | dd of=dtype.kdocs bs=1 seek=12 conv=notrunc status=none
  expect 1 "kiln-run: error: dtype.kdocs: token dtype code 7 is neither uint16 (1) nor uint32 (2)" train --weights w.safetensors --data dtype.kdocs
  expect 2 "kiln-run: error: d.kdocs: the dataset holds uint16 tokens; --token-dtype uint32 does not apply (drop it)" train --weights w.safetensors --data d.kdocs --token-dtype uint32
  # Batching flags: checked, and only for datasets.
  expect 2 "kiln-run: error: --batching must be pad or pack, got 'tight'" train --weights w.safetensors --data d.kdocs --batching tight
  expect 2 "kiln-run: error: --batching is for a fine-tuning dataset; t.bin is raw token ids (scripts/kiln_dataset.py writes one)" train --weights w.safetensors --batching pack
  expect 1 "kiln-run: error: --batching pack fills rows of one length: give one --seq" train --weights w.safetensors --data d.kdocs --batching pack --seq 8,16
  expect 1 "kiln-run: error: --batching pack: the step has no position_ids input, so packed documents would attend to each other (export with scripts/export_hf.py --position-ids)" train --weights w.safetensors --data d.kdocs --batching pack
  ;;
data-stats)
  # Documents of 6, 5 and 4 tokens (5, 4 and 3 positions) at seq 8: padding
  # fills 12 of 24 slots, packing 12 of 16 (5 | 4+3).
  printf '%s\n' '{"input_ids": [1, 2, 3, 4, 5, 6], "labels": [-100, -100, 3, 4, 5, 6]}' \
    '{"input_ids": [7, 8, 9, 10, 11], "labels": [-100, -100, -100, 10, 11]}' \
    '{"input_ids": [12, 13, 14, 15]}' >s.jsonl
  python3 "$kiln_dataset" s.jsonl -o s.kdocs >/dev/null || fail "converter"
  expect 0 "" "$kiln_run" data-stats s.kdocs --seq 8
  grep -q '^data s.kdocs: 3 documents, 15 tokens (10 with loss, 66.7%), uint16, largest id 15$' out.txt || fail "counts"
  grep -q '^padding: 3 rows (of 8) in 3 micro-batches, 12 of 24 slots hold tokens, waste 50.0%$' out.txt || fail "padding"
  grep -q '^packing: 2 rows (of 8, 3 documents) in 2 micro-batches, 12 of 16 slots hold tokens, waste 25.0%$' out.txt || fail "packing"
  # Buckets: rows of 8, 4 and 4.
  expect 0 "" "$kiln_run" data-stats s.kdocs --seq 4,8
  grep -q '^padding: 3 rows (each micro-batch at the smallest bucket of 4,8 holding its longest) in 3 micro-batches, 12 of 16 slots hold tokens, waste 25.0%$' out.txt || fail "buckets"
  # Truncation at seq 4: the first document loses a position.
  expect 0 "" "$kiln_run" data-stats s.kdocs --seq 4
  grep -q '^at seq 4, batch 1, labels shifted: 11 positions from 3 documents (1 truncated, 1 positions cut)$' out.txt || fail "truncation"
  expect 1 "kiln-run: error: s.kdocs: document 2 position 0: token 12 is outside the vocabulary (12 ids)" "$kiln_run" data-stats s.kdocs --seq 8 --vocab-size 12
  # --dump writes what train would feed: the second packed micro-batch is
  # documents 1 and 2 (positions 4 + 3) and one padding slot.
  mkdir dump
  expect 0 "" "$kiln_run" data-stats s.kdocs --seq 8 --dump dump --batching pack --shuffle off
  grep -q '^wrote 2 micro-batches to dump$' out.txt || fail "dump count"
  dumped() { python3 -c 'import struct, sys; d = open(sys.argv[1], "rb").read(); print(*struct.unpack(f"<{len(d) // 8}q", d))' "$1"; }
  [ "$(dumped dump/1.input_ids.bin)" = "7 8 9 10 12 13 14 0" ] || fail "dumped input_ids"
  [ "$(dumped dump/1.position_ids.bin)" = "0 1 2 3 0 1 2 0" ] || fail "dumped position_ids"
  [ "$(dumped dump/1.labels.bin)" = "-100 -100 10 11 13 14 15 -100" ] || fail "dumped labels"
  [ "$(sed -n 2p dump/batches.jsonl)" = '{"index": 1, "batch": 1, "seq": 8, "counted": 5}' ] || fail "batches.jsonl"
  expect 2 "kiln-run: error: --batching is for --dump DIR" "$kiln_run" data-stats s.kdocs --seq 8 --batching pack
  expect 2 "kiln-run: error: missing --seq (see 'kiln-run data-stats --help')" "$kiln_run" data-stats s.kdocs
  expect 1 "kiln-run: error: s.jsonl: not a Kiln dataset (no KILNDOCS magic; scripts/kiln_dataset.py writes one)" "$kiln_run" data-stats s.jsonl --seq 8
  ;;
train-not-built)
  fixtures
  "$test_files" tokens t32.bin 5000 --dtype uint32
  # Without a driver the device checks are skipped; with one they run.
  for args in "--weights w.safetensors" "--init random:7 --data t32.bin --token-dtype uint32"; do
    # shellcheck disable=SC2086
    train $args >out.txt 2>err.txt; rc=$?
    cat out.txt err.txt
    [ $rc = 5 ] || fail "exit $rc, expected 5"
    [ "$(wc -l <err.txt)" = 1 ] || fail "stderr must be one line"
    grep -q '^kiln-run: error: the artifact has no step program (artifact, \(weights, \)\?data and guards are valid; \(device checks skipped: no CUDA driver\|device 0: .*, [0-9]* kernel image(s) loaded ([0-9]* by PTX JIT), cuBLASLt [0-9.]* started\)); recompile with kiln compile --emit=artifact; nothing was trained$' err.txt ||
      fail "not the not-built line"
    grep -q '^data t.*\.bin: 5000 tokens, 2 windows of 17 per step (seed 0)$' out.txt || fail "data summary"
  done
  ;;
train-gemm-step | train-gemm-step-gpu)
  # A GEMM-only step program (kiln-test-files gemm-step): without a driver
  # the run stops before training; on the GPU (required by the -gpu case)
  # two steps give 4 and 376, with and without CUDA Graphs.
  "$test_files" gemm-step g || fail "fixture"
  "$kiln_run" train g.kiln --weights g.safetensors --input x=g.x.bin --steps 2 --batch 2 --seq 3 --log-every 1 >out.txt 2>err.txt; rc=$?
  cat out.txt err.txt
  if [ "$case_name" = train-gemm-step-gpu ] || ! grep -q "no CUDA driver" err.txt; then
    [ $rc = 0 ] || fail "exit $rc, expected 0"
    grep -q '^step 1 loss 4.0000000 step_ms' out.txt || fail "step 1 loss"
    grep -q '^step 2 loss 376.0000000 step_ms' out.txt || fail "step 2 loss"
    grep -q '^cuda graphs: 1 captured, 1 instantiated, 0 patched for a new shape$' out.txt || fail "graph capture"
    grep -q "arena and GEMM workspace (the artifact's memory plan)$" out.txt || fail "memory plan not used"
    "$kiln_run" train g.kiln --weights g.safetensors --input x=g.x.bin --steps 2 --batch 2 --seq 3 --log-every 1 --graphs off >out.txt 2>err.txt || fail "graphs off"
    grep -q '^step 2 loss 376.0000000 step_ms' out.txt || fail "step 2 loss without graphs"
    # --progress on: the bar is redrawn in place (\r) and ends complete.
    "$kiln_run" train g.kiln --weights g.safetensors --input x=g.x.bin --steps 2 --batch 2 --seq 3 --log-every 1 --progress on >out.txt 2>err.txt || fail "progress"
    grep -q '\[##############################\] 2/2  loss 376.0000  [0-9.]* ms/step  ETA 0s' out.txt || fail "progress bar"
    # The log line follows the bar's clearing (\r, erase line) on a terminal.
    grep -q 'step 2 loss 376.0000000 step_ms' out.txt || fail "step 2 loss with --progress on"
    # --profile times the last step's ops (same loss) and lists them.
    "$kiln_run" train g.kiln --weights g.safetensors --input x=g.x.bin --steps 2 --batch 2 --seq 3 --log-every 1 --profile prof.tsv >out.txt 2>err.txt || fail "profile"
    cat out.txt
    grep -q '^step 2 loss 376.0000000 step_ms' out.txt || fail "step 2 loss with --profile"
    grep -q '^profile (last step, no graph): [0-9]* ops' out.txt || fail "profile summary"
    grep -q 'cuBLASLt GEMMs' out.txt || fail "profile categories"
    head -1 prof.tsv | grep -q '^op	label	ms$' || fail "profile TSV header"
    grep -q '	gemm [0-9]*x[0-9]*x[0-9]*' prof.tsv || fail "profile TSV GEMM rows"
    expect 2 "kiln-run: error: --input y: the step has no data input 'y'" "$kiln_run" train g.kiln --weights g.safetensors --input y=g.x.bin --steps 1 --batch 2 --seq 3
    head -c 12 g.x.bin >short.bin
    expect 1 "kiln-run: error: short.bin: 12 bytes; input 'x' needs 6 F32 elements (24 bytes)" "$kiln_run" train g.kiln --weights g.safetensors --input x=short.bin --steps 1 --batch 2 --seq 3
  else
    [ $rc = 3 ] || fail "exit $rc, expected 3"
    # One sentence, said once.
    grep -q '^kiln-run: error: no CUDA driver found (libcuda\.so\.1: .*); kiln-run needs an NVIDIA GPU and driver; nothing was trained$' err.txt ||
      fail "no-driver line"
    [ "$(grep -o 'CUDA driver' err.txt | wc -l)" = 1 ] || fail "the no-driver line repeats itself"
  fi
  ;;
train-init-only | train-init-only-gpu)
  # --steps 0: load, run the init program, save; no step runs. The fixture's
  # init program makes lora_A = [[0.5, -0.25, 0.125]] and lora_B = 0; its
  # step's loss is x[0] . lora_A = 0.375. Without a driver (and not the -gpu
  # case) the run stops before the device, after accepting --steps 0.
  "$test_files" lora-step l || fail "fixture"
  init_only() {
    "$kiln_run" train l.kiln --init random:0 --input x=l.x.bin --batch 2 --seq 3 --log-every 1 "$@"
  }
  init_only --steps 0 --save-adapters ad --save ck.safetensors >out.txt 2>err.txt; rc=$?
  cat out.txt err.txt
  if [ "$case_name" = train-init-only-gpu ] || ! grep -q "no CUDA driver" err.txt; then
    [ $rc = 0 ] || fail "exit $rc, expected 0"
    ! grep -q '^step [0-9]' out.txt || fail "a step ran"
    grep -q '^0 steps: parameters loaded and initialized, nothing trained$' out.txt || fail "0-step line"
    grep -q '^saved 2 adapter tensors (PEFT) to ad$' out.txt || fail "adapters line"
    grep -q '^saved ck.safetensors: step 0$' out.txt || fail "checkpoint line"
    expect 0 "" "$kiln_run" ckpt-info ad/adapter_model.safetensors
    grep -q '^  base_model.model.m.lora_A.weight  F32 \[1, 3\]$' out.txt || fail "lora_A entry"
    grep -q '^  base_model.model.m.lora_B.weight  F32 \[2, 1\]$' out.txt || fail "lora_B entry"
    # The saved values are the init program's (python3 with the standard
    # library only: safetensors is an 8-byte length, a JSON header, data).
    python3 - ad/adapter_model.safetensors <<'PY' || fail "adapter values"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
def values(name):
    a, b = header[name]["data_offsets"]
    raw = data[8 + n + a:8 + n + b]
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))
a = values("base_model.model.m.lora_A.weight")
b = values("base_model.model.m.lora_B.weight")
assert a == [0.5, -0.25, 0.125], a
assert b == [0.0, 0.0], b
PY
    # The same init feeds the first step.
    init_only --steps 1 >out.txt 2>err.txt || { cat out.txt err.txt; fail "one step"; }
    cat out.txt
    grep -q '^step 1 loss 0.3750000 step_ms' out.txt || fail "step 1 loss"
  else
    [ $rc = 3 ] || fail "exit $rc, expected 3"
    # One sentence, said once.
    grep -q '^kiln-run: error: no CUDA driver found (libcuda\.so\.1: .*); kiln-run needs an NVIDIA GPU and driver; nothing was trained$' err.txt ||
      fail "no-driver line"
    [ "$(grep -o 'CUDA driver' err.txt | wc -l)" = 1 ] || fail "the no-driver line repeats itself"
  fi
  ;;
train-adapters | train-adapters-gpu)
  # --adapters DIR: the LoRA adapters start from a PEFT adapter directory
  # instead of the init program. lora-step's loss is (x A^T)[0, 0]: with
  # A = [[1, 2, 3]] (stored as BF16, converted to the step's F32) and
  # x = [[1,2,3],[4,5,6]] it is 14, where the init program's A gives 0.375.
  "$test_files" lora-step l || fail "fixture"
  peft_dir() { # DIR R ALPHA TENSOR:DTYPE:SHAPE:VALUES...
    local dir=$1 r=$2 alpha=$3; shift 3
    mkdir -p "$dir"
    printf '{"peft_type": "LORA", "r": %s, "lora_alpha": %s, "target_modules": ["m"]}\n' "$r" "$alpha" \
      >"$dir/adapter_config.json"
    python3 - "$dir/adapter_model.safetensors" "$@" <<'PY' || fail "adapter fixture"
import json, struct, sys
header, data = {}, b""
for spec in sys.argv[2:]:
    name, dtype, shape, values = spec.split(":")
    values = [float(v) for v in values.split(",")] if values else []
    if dtype == "F32":
        raw = struct.pack("<%df" % len(values), *values)
    else:  # BF16: the upper half of the fp32 bits (exact for these values)
        raw = b"".join(struct.pack("<f", v)[2:] for v in values)
    header["base_model.model." + name] = {"dtype": dtype, "shape": [int(d) for d in shape.split("x")],
                                          "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
text = json.dumps(header).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + data)
PY
  }
  A=m.lora_A.weight:BF16:1x3:1,2,3 B=m.lora_B.weight:F32:2x1:0,0
  peft_dir good 1 2 "$A" "$B"
  peft_dir missing 1 2 "$A"
  peft_dir shape 1 2 m.lora_A.weight:F32:3x1:1,2,3 "$B"
  peft_dir extra 1 2 "$A" "$B" m.other.lora_A.weight:F32:1x1:1
  peft_dir rank 4 8 "$A" "$B"
  mkdir noconfig && cp good/adapter_model.safetensors noconfig/
  lt() { "$kiln_run" train l.kiln --init random:0 --input x=l.x.bin --batch 2 --seq 3 --log-every 1 "$@"; }
  expect 1 "kiln-run: error: missing/adapter_model.safetensors: lacks 'base_model.model.m.lora_B.weight' (F32 [2, 1]), the step's adapter 'm.lora_B.weight'" lt --steps 1 --adapters missing
  expect 1 "kiln-run: error: shape/adapter_model.safetensors: 'base_model.model.m.lora_A.weight' is F32 [3, 1], but the step's adapter is F32 [1, 3]" lt --steps 1 --adapters shape
  expect 1 "kiln-run: error: extra/adapter_model.safetensors: holds 'base_model.model.m.other.lora_A.weight', which is no LoRA parameter of the step (adapters of another model, or other target modules?)" lt --steps 1 --adapters extra
  expect 1 "kiln-run: error: rank/adapter_config.json: r 4, lora_alpha 8; the artifact was compiled with r=1,alpha=2" lt --steps 1 --adapters rank
  lt --steps 1 --adapters noconfig >out.txt 2>err.txt; rc=$?
  cat out.txt err.txt
  [ $rc = 1 ] && grep -q "^kiln-run: error: noconfig/adapter_config.json: " err.txt || fail "missing config not refused"
  expect 2 "kiln-run: error: --adapters and --resume exclude each other (a checkpoint holds the adapters)" lt --steps 1 --adapters good --resume ck.safetensors
  fixtures
  expect 1 "kiln-run: error: --adapters: the artifact has no LoRA adapters (compile with kiln compile --lora)" train --weights w.safetensors --adapters good
  lt --steps 1 --adapters good >out.txt 2>err.txt; rc=$?
  cat out.txt err.txt
  grep -q "^adapters good: 2 LoRA tensors (PEFT), replacing the init program's$" out.txt || fail "adapters line"
  if [ "$case_name" = train-adapters-gpu ] || ! grep -q "no CUDA driver" err.txt; then
    [ $rc = 0 ] || fail "exit $rc, expected 0"
    grep -q '^step 1 loss 14.0000000 step_ms' out.txt || fail "step 1 loss is not the given adapters'"
  else
    [ $rc = 3 ] || fail "exit $rc, expected 3"
  fi
  ;;
report | report-gpu)
  # kiln-run report: the planned peak of an artifact at --batch/--seq (the
  # memory plan's persistent + arena bytes, as inspect prints them, plus the
  # 32 MiB cuBLASLt workspace); on a GPU the measured columns.
  "$test_files" gemm-step g || fail "fixture"
  "$test_files" artifact a.kiln || fail "fixture"
  printf 'not an artifact' >garbage.kiln
  expect 2 "kiln-run: error: 'report' takes one or more artifact files (see 'kiln-run report --help')" "$kiln_run" report --batch 2 --seq 3
  expect 2 "kiln-run: error: missing --seq (see 'kiln-run report --help')" "$kiln_run" report g.kiln --batch 2
  expect 2 "kiln-run: error: --batch needs an integer >= 1, got '0'" "$kiln_run" report g.kiln --batch 0 --seq 3
  expect 2 "kiln-run: error: --format must be md or json, got 'csv'" "$kiln_run" report g.kiln --batch 2 --seq 3 --format csv
  expect 2 "kiln-run: error: --steps needs an integer >= 1, got '0'" "$kiln_run" report g.kiln --batch 2 --seq 3 --steps 0
  expect 2 "kiln-run: error: --output /dev/null: not a regular file (a character device); refusing to replace it" "$kiln_run" report g.kiln --batch 2 --seq 3 --output /dev/null
  "$kiln_run" report --bogus 1 g.kiln >out.txt 2>err.txt && fail "an unknown flag was accepted"
  grep -q "^kiln-run: error: .*bogus.* (see 'kiln-run report --help')$" err.txt || fail "unknown-flag line"
  "$kiln_run" inspect g.kiln >inspect.txt || fail "inspect"
  read -r persistent arena < <(sed -n 's/^memory plan at batch=2, seq=3: \([0-9]*\) bytes persistent + \([0-9]*\) arena.*/\1 \2/p' inspect.txt)
  [ -n "$persistent" ] || fail "no memory plan line in inspect"
  args=(report g.kiln garbage.kiln a.kiln --batch 2 --seq 3)
  [ "$case_name" = report ] && args+=(--plan-only)
  expect 0 "" "$kiln_run" "${args[@]}" --format json --steps 2 --warmup 1 --output r.json
  [ ! -s out.txt ] || fail "--output also wrote to stdout"
  python3 - r.json "$persistent" "$arena" "$case_name" <<'PY' || fail "report JSON"
import json, sys
doc = json.load(open(sys.argv[1]))
persistent, arena, gpu = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "report-gpu"
assert doc["format"] == "kiln-run-report" and doc["version"] == 1, doc
assert doc["settings"] == {"batch": 2, "seq": 3, "steps": 2, "warmup": 1, "seed": 0,
                           "device": doc["settings"]["device"]}, doc["settings"]
g, garbage, a = doc["rows"]
p = g["planned"]
assert g["error"] is None and g["program"] == "step", g
assert p == {"error": None, "peak_bytes": persistent + arena + (32 << 20),
             "persistent_bytes": persistent, "arena_bytes": arena,
             "workspace_bytes": 32 << 20, "source": "the artifact's memory plan"}, p
m = g["measured"]
if gpu:
    assert m["error"] is None and m["steps"] == 2, m
    assert m["step_ms_median"] > 0 and m["tokens_per_second"] > 0, m
    # The gemm step's first loss from random w is finite; the measured peak
    # holds at least the planned bytes' workspace.
    assert m["peak_bytes"] >= 32 << 20, m
    assert abs(m["peak_vs_planned"] - (m["peak_bytes"] / p["peak_bytes"] - 1)) < 1e-9, m
else:
    assert m["error"] == "--plan-only" and m["peak_bytes"] is None, m
assert garbage["error"].startswith("garbage.kiln: ") and "planned" not in garbage, garbage
# A guard the sizes violate is the row's reason, not an exit.
assert a["planned"]["error"] == ("--batch/--seq: seq=3 violates 8 <= seq <= 1024 "
                                 "(required by --dynamic seq=8..1024:8)"), a
assert a["measured"]["error"] == a["planned"]["error"], a
PY
  # Markdown: one row per artifact, the reasons in their cells.
  expect 0 "" "$kiln_run" report g.kiln garbage.kiln --batch 2 --seq 3 --plan-only
  grep -q "^| g.kiln | $(python3 -c "print('%.1f' % (($persistent + $arena + (32 << 20)) / 2**20))") MiB (" out.txt || fail "md planned peak"
  grep -q "^| g.kiln | .* | not measured: --plan-only |" out.txt || fail "md measured cell"
  grep -q "^| garbage.kiln | error: garbage.kiln: " out.txt || fail "md error row"
  # The sample artifact has no step program: the row says so.
  expect 0 "" "$kiln_run" report a.kiln --batch 2 --seq 16
  grep -q "^| a.kiln | not planned: no step program (compile with kiln compile --emit=artifact) | not measured: no step program" out.txt || fail "no-step-program row"
  ;;
train-device-gpu)
  # On the GPU machine: the device checks run and pass.
  fixtures
  train --weights w.safetensors >out.txt 2>err.txt; rc=$?
  cat out.txt err.txt
  [ $rc = 5 ] || fail "exit $rc, expected 5"
  grep -q '^kiln-run: error: the artifact has no step program (artifact, weights, data and guards are valid; device 0: .*, sm_[0-9]*, .*, 1 kernel image(s) loaded (1 by PTX JIT), cuBLASLt [0-9.]* started); recompile with kiln compile --emit=artifact; nothing was trained$' err.txt ||
    fail "device checks did not run"
  ;;
train-wrong-arch-gpu)
  # On the GPU machine: an artifact with only an sm_52 cubin and no PTX.
  fixtures
  "$test_files" artifact a.kiln --cubin-only sm_52 || fail "fixture"
  train --weights w.safetensors >out.txt 2>err.txt; rc=$?
  cat out.txt err.txt
  [ $rc = 3 ] || fail "exit $rc, expected 3"
  grep -q "^kiln-run: error: a.kiln: kernel 'add' has no image for this sm_[0-9]* device (it has: sm_52); recompile with --target sm_[0-9]*\$" err.txt ||
    fail "not the wrong-arch line"
  ;;
kill-during-save)
  # A checkpoint being replaced is never damaged: SIGKILL the writer while it
  # is in the middle of writing the new one; the old one must load intact.
  "$test_files" checkpoint ckpt.safetensors --megabytes 32 --generation 1 || fail "first checkpoint"
  "$test_files" checkpoint ckpt.safetensors --megabytes 96 --generation 2 \
    --pause-at-mb 40 --marker writing &
  writer=$!
  for _ in $(seq 300); do [ -e writing ] && break; sleep 0.1; done
  [ -e writing ] || { kill -9 $writer; fail "writer never reached 40 MB"; }
  kill -9 $writer; wait $writer 2>/dev/null
  ls -la
  temp=$(ls -A | grep -c '^\.ckpt\.safetensors\.tmp-')
  [ "$temp" = 1 ] || fail "expected the killed writer's temporary file"
  expect 0 "" "$kiln_run" ckpt-info ckpt.safetensors
  "$test_files" verify-checkpoint ckpt.safetensors --generation 1 || fail "previous checkpoint damaged"
  # Unpaused writers killed at varying moments: always one whole checkpoint.
  for delay in 0.01 0.05 0.1 0.2 0.4; do
    "$test_files" checkpoint ckpt.safetensors --megabytes 64 --generation 3 &
    writer=$!; sleep $delay; kill -9 $writer 2>/dev/null; wait $writer 2>/dev/null
    "$test_files" verify-checkpoint ckpt.safetensors --generation 1 ||
      "$test_files" verify-checkpoint ckpt.safetensors --generation 3 ||
      fail "checkpoint damaged after a kill at ${delay}s"
    "$test_files" checkpoint ckpt.safetensors --megabytes 32 --generation 1 || fail "rewrite"
  done
  ;;
tune-usage)
  # kiln-run tune: flags and the database path are checked before anything loads.
  fixtures
  expect 0 "" "$kiln_run" tune --help
  grep -q -- '--tune-topk K  *cuBLASLt candidates per GEMM (default: the artifact' out.txt || fail "--tune-topk help"
  grep -q -- '--tune-extra N  *thin GEMMs (m, n or k <= 64, or k >= 4 max(m, n)):$' out.txt || fail "--tune-extra help"
  grep -q -- '--tune-launches on|off  *the generated kernels. launch variants the artifact$' out.txt || fail "--tune-launches help"
  tune() { timeout 20 "$kiln_run" tune a.kiln --batch 2 --seq 16 "$@"; }
  expect 2 "kiln-run: error: 'tune' takes one artifact file (see 'kiln-run tune --help')" "$kiln_run" tune --batch 2 --seq 16
  expect 2 "kiln-run: error: missing --seq (see 'kiln-run tune --help')" "$kiln_run" tune a.kiln --batch 2
  expect 2 "kiln-run: error: --tune-topk needs an integer >= 1, got '0'" tune --init random:1 --tune-topk 0
  expect 2 "kiln-run: error: --tune-topk needs an integer from 1 to 64, got 65" tune --init random:1 --tune-topk 65
  expect 2 "kiln-run: error: --tune-extra needs an integer >= 0, got 'x'" tune --init random:1 --tune-extra x
  expect 2 "kiln-run: error: --tune-extra needs an integer from 0 to 63, got 64" tune --init random:1 --tune-extra 64
  expect 2 "kiln-run: error: --tune-launches must be on or off, got 'auto'" tune --init random:1 --tune-launches auto
  expect 2 "kiln-run: error: --reps needs an integer >= 1, got 'x'" tune --init random:1 --reps x
  expect 2 "kiln-run: error: --attention must be auto, kernels or cudnn, got 'xla'" tune --init random:1 --attention xla
  expect 2 "kiln-run: error: no weights: pass --weights FILE or --init random:SEED" tune
  expect 2 "kiln-run: error: unknown option '--steps' (see 'kiln-run tune --help')" tune --init random:1 --steps 3
  mkdir dbdir && mkfifo fifo
  expect 2 "kiln-run: error: --db dbdir: not a regular file (a directory); refusing to replace it" tune --init random:1 --db dbdir
  expect 2 "kiln-run: error: --db fifo: not a regular file (a FIFO); refusing to replace it" tune --init random:1 --db fifo
  expect 2 "kiln-run: error: no --db and neither XDG_CACHE_HOME nor HOME is set" env -u HOME -u XDG_CACHE_HOME "$kiln_run" tune a.kiln --batch 2 --seq 16 --init random:1
  # A database of another format version is never replaced.
  printf 'kiln-tuning-db 2 crc32c=0x00000000 bytes=2\n{}' >v2.db
  expect 1 "kiln-run: error: v2.db: a tuning database of format version 2 (this kiln-run writes 1); not replaced: pass another --db" tune --init random:1 --db v2.db
  # The artifact comes next: a.kiln has no step program.
  expect 5 "kiln-run: error: a.kiln: the artifact has no step program (recompile with kiln compile --emit=artifact)" tune --init random:1 --db new.db
  [ ! -e new.db ] || fail "nothing tuned, yet a database was written"
  # The artifact's search space (meta "tuning") is checked like the rest of it.
  "$test_files" get-section a.kiln meta | python3 -c 'import json,sys; m=json.load(sys.stdin); m["tuning"]={"gemm_topk":1000000000}; print(json.dumps(m))' >meta.json
  cp a.kiln big-topk.kiln && "$test_files" set-section big-topk.kiln meta "$(cat meta.json)" || fail "set-section"
  expect 1 'kiln-run: error: big-topk.kiln: meta "tuning" needs "gemm_topk", an integer from 1 to 64' "$kiln_run" tune big-topk.kiln --batch 2 --seq 16 --init random:1 --db new.db
  # A damaged one is reported, then (after tuning) replaced.
  printf 'garbage' >bad.db
  tune --init random:1 --db bad.db >out.txt 2>err.txt; rc=$?
  cat out.txt err.txt
  [ $rc = 5 ] || fail "exit $rc, expected 5"
  [ "$(head -1 err.txt)" = 'kiln-run: note: bad.db: not a Kiln tuning database (no "kiln-tuning-db" header line); ignored, it will be replaced' ] || fail "not the damaged-database note"
  ;;
train-tuning)
  # train --tuning/--db: a bad value is a usage error; a damaged or missing
  # database is one note, never trusted, and training goes on (here to the
  # not-built error: the fixture has no step program).
  fixtures
  expect 2 "kiln-run: error: --tuning must be on or off, got 'auto'" train --init random:1 --tuning auto
  "$test_files" tuning-db good.db --entries 3 --generation 1 || fail "fixture"
  cp good.db flipped.db && "$test_files" flip flipped.db 200 0 || fail "fixture"
  check() { # WANT-NOTE ARGS...: exit 5, the note (or none), then the not-built line
    local note=$1; shift
    train --init random:1 "$@" >out.txt 2>err.txt; rc=$?
    cat out.txt err.txt
    [ $rc = 5 ] || fail "exit $rc, expected 5"
    if [ -n "$note" ]; then
      [ "$(wc -l <err.txt)" = 2 ] || fail "expected the note and the error"
      [ "$(head -1 err.txt)" = "$note" ] || fail "note is '$(head -1 err.txt)', expected '$note'"
    else
      [ "$(wc -l <err.txt)" = 1 ] || fail "expected the error alone"
    fi
  }
  check "kiln-run: note: tuning database flipped.db: fails its CRC-32C check (damaged); ignored, defaults used" --db flipped.db
  check "kiln-run: note: no tuning database at none.db (write one with kiln-run tune); defaults used" --db none.db
  check "" --db good.db
  check "" --db flipped.db --tuning off
  # Without --db the per-user cache is read; a missing one is no note.
  HOME=$PWD/nohome XDG_CACHE_HOME= check ""
  XDG_CACHE_HOME=$PWD/cache check ""
  mkdir -p cache/kiln && cp flipped.db cache/kiln/tuning.db
  XDG_CACHE_HOME=$PWD/cache train --init random:1 >out.txt 2>err.txt
  grep -q "^kiln-run: note: tuning database $PWD/cache/kiln/tuning.db: fails its CRC-32C check (damaged); ignored, defaults used\$" err.txt ||
    fail "the cache database was not read"
  ;;
tune-gemm-step-gpu)
  # On the GPU: tune the GEMM-only fixture, then train from the database
  # (same losses: the numerics bound holds) and from a foreign one.
  "$test_files" gemm-step g || fail "fixture"
  tune() { "$kiln_run" tune g.kiln --weights g.safetensors --input x=g.x.bin --batch 2 --seq 3 --reps 5 --progress off "$@"; }
  tune --db t.db >out.txt 2>err.txt; rc=$?
  cat out.txt err.txt
  [ $rc = 0 ] || fail "exit $rc, expected 0"
  grep -q '^tune g.kiln on .* (sm_[0-9]*, [0-9]* SMs), driver [0-9]*, CUDA [0-9]*, cuBLASLt [0-9]*, cuDNN none$' out.txt || fail "key line"
  grep -q '^step batch=2,seq=3: default [0-9.]* ms, tuned [0-9.]* ms ([-+][0-9.]*%), loss rel. difference [0-9.e+-]*; 3 ops measured$' out.txt || fail "step line"
  grep -q '^tune: [0-3] of 3 ops changed in [0-9.]* s; wrote t.db$' out.txt || fail "summary line"
  head -1 t.db | grep -q '^kiln-tuning-db 1 crc32c=0x[0-9a-f]\{8\} bytes=[0-9]*$' || fail "database header"
  [ "$(grep -c '"kind": "gemm"' t.db)" = 3 ] || fail "expected 3 GEMM entries"
  run() { "$kiln_run" train g.kiln --weights g.safetensors --input x=g.x.bin --steps 2 --batch 2 --seq 3 --log-every 1 "$@"; }
  run --db t.db >out.txt 2>err.txt || { cat out.txt err.txt; fail "train with the database"; }
  cat out.txt
  grep -q '^tuning: 3 ops from t.db, 0 defaults$' out.txt || fail "ops from the database"
  grep -q '^step 2 loss 376.0000000 step_ms' out.txt || fail "step 2 loss with the database"
  run --db t.db --tuning off >out.txt 2>err.txt || fail "--tuning off"
  ! grep -q '^tuning:' out.txt || fail "--tuning off read the database"
  # Configurations beyond the heuristic (every GEMM of the fixture is
  # thin): a choice among them, forced, is rebuilt by train from its
  # "config" byte for byte (else it would fall back with a note).
  [ "$(grep -c '"config": "id=[0-9]*,tile=[0-9]*,stages=' t.db)" = 3 ] || fail "configurations recorded"
  KILN_TUNE_PICK_BEYOND_HEURISTIC=1 tune --db x.db >out.txt 2>err.txt || { cat out.txt err.txt; fail "tune, beyond the heuristic"; }
  cat out.txt
  grep -q '^beyond the heuristic: [1-3] thin GEMMs screened [0-9]* configurations ([0-9]* measured again near the cut); [1-3] chose one of them$' out.txt ||
    fail "no choice beyond the heuristic"
  run --db x.db >out.txt 2>err.txt || { cat out.txt err.txt; fail "train with choices beyond the heuristic"; }
  cat out.txt
  grep -q '^tuning: 3 ops from x.db, 0 defaults$' out.txt || fail "configurations rebuilt by train"
  grep -q '^step 2 loss 376.0000000 step_ms' out.txt || fail "step 2 loss beyond the heuristic"
  # Tuning again keeps the other entries and replaces this machine's.
  "$test_files" tuning-db t2.db --entries 2 || fail "fixture"
  tune --db t2.db >out.txt 2>err.txt || { cat out.txt err.txt; fail "second tune"; }
  [ "$(grep -c '"kind": "gemm"' t2.db)" = 5 ] || fail "the other machine's entries were not kept"
  # A database of another machine: every op at its default, with a note.
  "$test_files" tuning-db other.db --entries 2 || fail "fixture"
  run --db other.db >out.txt 2>err.txt || fail "train with a foreign database"
  cat out.txt
  grep -q '^tuning: 0 ops from other.db, 3 defaults (no entries for this machine, .*; the database holds 2 for others: run kiln-run tune here)$' out.txt ||
    fail "key mismatch note"
  grep -q '^step 2 loss 376.0000000 step_ms' out.txt || fail "step 2 loss with a foreign database"
  ;;
kill-during-tune-db)
  # A tuning database being replaced is never damaged: SIGKILL the writer in
  # the middle of the new one; the old one must load intact.
  "$test_files" tuning-db t.db --entries 20000 --generation 1 || fail "first database"
  "$test_files" verify-tuning-db t.db --entries 20000 --generation 1 || fail "first database unreadable"
  "$test_files" tuning-db t.db --entries 20000 --generation 2 --pause-at-kb 2048 --marker writing &
  writer=$!
  for _ in $(seq 300); do [ -e writing ] && break; sleep 0.1; done
  [ -e writing ] || { kill -9 $writer; fail "writer never reached 2 MiB"; }
  kill -9 $writer; wait $writer 2>/dev/null
  ls -la
  [ "$(ls -A | grep -c '^\.t\.db\.tmp-')" = 1 ] || fail "expected the killed writer's temporary file"
  "$test_files" verify-tuning-db t.db --entries 20000 --generation 1 || fail "previous database damaged"
  # Unpaused writers killed at varying moments: always one whole database.
  for delay in 0.01 0.05 0.1 0.2 0.4; do
    "$test_files" tuning-db t.db --entries 20000 --generation 3 &
    writer=$!; sleep $delay; kill -9 $writer 2>/dev/null; wait $writer 2>/dev/null
    "$test_files" verify-tuning-db t.db --entries 20000 --generation 1 ||
      "$test_files" verify-tuning-db t.db --entries 20000 --generation 3 ||
      fail "database damaged after a kill at ${delay}s"
    "$test_files" tuning-db t.db --entries 20000 --generation 1 || fail "rewrite"
  done
  ;;
*)
  fail "unknown case" ;;
esac
echo "PASS [$case_name]"
