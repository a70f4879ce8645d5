#!/usr/bin/env bash
# kiln-run command tests, one case per ctest entry:
#   kiln-run-tests.sh CASE KILN_RUN KILN_TEST_FILES
# Each case builds its fixtures with kiln-test-files in a fresh directory and
# checks the exit code and the exact error line (stderr must be one line).
set -uo pipefail
case_name=$1 kiln_run=$2 test_files=$3
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
  grep -q '^kernel modules (1):$' out.txt || fail "modules"
  grep -q '^kernels (2 distinct, 5 launches):$' out.txt || fail "kernels header"
  grep -q '^  main_k0_silu  module0  4 launches$' out.txt || fail "shared kernel"
  grep -q '^  main_k1_exp  module0  1 launch$' out.txt || fail "single kernel"
  # The gemm-only step launches no kernel.
  "$test_files" gemm-step g || fail "fixtures"
  expect 0 "" "$kiln_run" inspect g.kiln
  grep -q '^kernels (0 distinct, 0 launches):$' out.txt || fail "no kernels"
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
  expect 2 "kiln-run: error: missing --data (see 'kiln-run train --help')" "$kiln_run" train a.kiln --steps 1
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
*)
  fail "unknown case" ;;
esac
echo "PASS [$case_name]"
