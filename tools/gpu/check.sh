#!/usr/bin/env bash
# One prepared run of msrl's GPU checks on a GPU machine that has CUDA torch and nvcc but no
# package registry: what the machine lacks travels as wheels in .whl/ (made beforehand with
# `pip download`, see tools/gpu/README.md), pycuda is built from its sdist with the machine's nvcc,
# then the phases named on the command line run in order, each bounded in time, each writing its
# log and one line per result to $OUT/summary.txt (the last thing printed).
#
#   OUT=/tmp/gpu-out bash tools/gpu/check.sh setup presets tests learning ppo envstep tag warpdrive
#
# Phases: setup (install, start the pycuda build), sync (wait for the phases started with +),
# presets (PPO CartPole under every preset on the GPU, trained to the shipped budget; PRESETS picks),
# tests (the GPU-relevant test files, on the GPU; TESTS picks, TEST_WORKERS the pytest workers, 12),
# ppo (benchmarks.training_speed in device mode), learning (every algorithm trains on the GPU:
# tests/e2e/test_learning_on_gpu.py; LEARN_WORKERS the pytest workers, 7), envstep (env steps/s of
# the torch and cuda backends through the public step API), tag (Tag's GPU rows), warpdrive
# (WarpDrive beside us).
set -u
OUT=${OUT:-/tmp/gpu-out}
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
DEADLINE=${DEADLINE:-560}  # seconds from the start by which every phase has ended
PYCUDA_SRC=/tmp/pycuda-src
LOGS=${LOGS:-/tmp/gpu-logs}  # the runs' own logs and run directories (what comes back is under $OUT)
mkdir -p "$OUT" "$LOGS"
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$OUT/summary.txt"; }
# bounded: run a command with a time limit, its output appended to a log; says how it ended
bounded() {
    local limit=$1 log=$2 what=$3
    shift 3
    local t=$(date +%s)
    local left=$((DEADLINE - (t - T0)))  # every phase ends before the run's deadline
    if [ "$left" -lt "$limit" ]; then limit=$left; fi
    if [ "$limit" -le 5 ]; then
        say "$what: not run (the ${DEADLINE}s deadline is near)"
        return 124
    fi
    echo "== $what" >>"$log"
    timeout --kill-after=5 "$limit" "$@" >>"$log" 2>&1
    local rc=$?
    say "$what: exit $rc in $(($(date +%s) - t))s"
    return $rc
}

export PYTHONUNBUFFERED=1 CI=true
export PYTHONPATH="$PYCUDA_SRC:$SITE${PYTHONPATH:+:$PYTHONPATH}"

phase_setup() {
    nvidia-smi -L | tee -a "$OUT/summary.txt"
    $PY -c "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name())" \
        | tee -a "$OUT/summary.txt"
    bounded 120 "$OUT/setup.log" "wheels" $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$SITE" .whl/*.whl  # not .whl/wd: see phase_warpdrive
    bounded 120 "$OUT/setup.log" "msrl (editable)" $PY -m pip install -q --no-index --no-deps \
        --no-build-isolation -e .
    # pycuda from its sdist, against this machine's toolkit, in the background (about a minute)
    local nvcc root
    nvcc=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
    root=$(dirname "$(dirname "$nvcc")")
    rm -rf "$PYCUDA_SRC" && mkdir -p "$PYCUDA_SRC"
    tar -xzf .whl/pycuda-*.tar.gz -C "$PYCUDA_SRC" --strip-components=1
    local libs="$root/lib64,$root/lib64/stubs,$root/targets/x86_64-linux/lib,$root/targets/x86_64-linux/lib/stubs"
    (
        cd "$PYCUDA_SRC" &&
            $PY configure.py --cuda-root="$root" --cudadrv-lib-dir="$libs" --cudart-lib-dir="$libs" \
                --curand-lib-dir="$libs" &&
            $PY setup.py build_ext --inplace -j 16
    ) >"$LOGS/pycuda.log" 2>&1 &
    echo $! >"$LOGS/pycuda.pid"
    say "pycuda build started (nvcc $nvcc)"
}

wait_pycuda() {
    local pid
    pid=$(cat "$LOGS/pycuda.pid" 2>/dev/null) || return 0
    while kill -0 "$pid" 2>/dev/null; do sleep 1; done
    tail -5 "$LOGS/pycuda.log" >>"$OUT/setup.log"
    if $PY -c "import pycuda.driver as d; d.init(); print('pycuda', d.get_version(), d.Device(0).name())" \
        >>"$OUT/summary.txt" 2>>"$OUT/setup.log"; then
        say "pycuda: built, driver imported"
    else
        cp "$LOGS/pycuda.log" "$OUT/pycuda.log"
        say "pycuda: FAILED (pycuda.log)"
    fi
    rm -f "$LOGS/pycuda.pid"
}

# One PPO CartPole run from the shipped config under a preset; its greedy result into the summary.
train() {
    local name=$1
    shift
    local log="$LOGS/train-$name.log"
    bounded "${TRAIN_LIMIT:-240}" "$log" "train $name" $PY -m msrl train configs/ppo_cartpole.yaml \
        --set "runs_dir=$LOGS/runs/$name" "$@"
    say "train $name: $(grep -E 'greedy evaluation|msrl: error|Error' "$log" | tail -2 | tr '\n' ' ')"
}

# PRESETS names the runs to make (default: all five)
wanted() { [ -z "${PRESETS:-}" ] || [[ " $PRESETS " == *" $1 "* ]]; }

phase_presets() {
    # all at once (16 cores, one GPU): each Ray-backed run starts its own local Ray
    wanted gpu_only && train gpu_only --set policy=gpu_only &
    wanted coarse-learner-gpu && train coarse-learner-gpu --set policy=single_learner_coarse \
        --set policy.learner_gpus=1 &
    wanted multi_learner-cuda && train multi_learner-cuda --set policy=multi_learner --set policy.device=cuda &
    wanted local-torch-cuda && train local-torch-cuda --set policy.device=cuda &
    wait_pycuda
    wanted local-cuda-kernels && train local-cuda-kernels --set policy.executor=cuda &
    wanted local-cuda-kernels-seed2 && train local-cuda-kernels-seed2 --set policy.executor=cuda --set seed=2 &
    wait
    for f in "$LOGS"/train-*.log; do
        echo "== $f" && tail -15 "$f"
    done >"$OUT/train.log"
}

phase_tests() {
    wait_pycuda
    bounded "${TEST_LIMIT:-300}" "$OUT/tests.log" "tests on the GPU" $PY -m pytest -q -p no:cacheprovider \
        -n ${TEST_WORKERS:-12} --dist loadfile -rfEs --timeout=120 --durations=10 \
        ${TESTS:-tests/executors tests/unit tests/e2e/test_gpu_learner_cli.py}
    say "tests: $(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$OUT/tests.log" | tail -1)"
}

phase_learning() {
    # one run per pytest worker (--dist load, not loadfile: the file's runs are its whole cost); -rA
    # keeps each run's printed greedy return, copied into the summary
    bounded "${LEARN_LIMIT:-380}" "$OUT/learning.log" "learning on the GPU" $PY -m pytest -q -p no:cacheprovider \
        -n "${LEARN_WORKERS:-7}" --dist load -rA --timeout=360 tests/e2e/test_learning_on_gpu.py
    say "learning: $(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped)' "$OUT/learning.log" | tail -1)"
    grep -E ' on the GPU .*: greedy ' "$OUT/learning.log" | sed 's/^/  /' >>"$OUT/summary.txt"
}

# waits for the phases started beside the ones before it (name+), so that timings run alone
phase_sync() { wait; }

phase_ppo() {
    case " ${PPO_ARGS:-} " in *" --executor cuda "*) wait_pycuda ;; esac  # the kernel envs need pycuda
    bounded "${PPO_LIMIT:-240}" "$OUT/bench.log" "training_speed device mode" $PY -m benchmarks.training_speed \
        --device cuda --num-envs ${PPO_ENVS:-4096 16384 65536} --budget ${PPO_BUDGET:-20000000} ${PPO_ARGS:-}
}

phase_envstep() {
    wait_pycuda
    # the cuda rows twice: episode bookkeeping fused into the step kernel, and apart (fuse_episodes=False)
    bounded "${ENVSTEP_LIMIT:-150}" "$OUT/bench.log" "env_stepping" $PY -m benchmarks.env_stepping \
        --rows ${ENVSTEP_ROWS:-torch,cuda} --sizes ${ENVSTEP_SIZES:-4096 65536 1048576 16777216} --seconds 1 --rounds 2 ${ENVSTEP_ARGS:-}
}

phase_tag() {
    wait_pycuda
    bounded "${TAG_LIMIT:-200}" "$OUT/bench.log" "tag_scaling GPU rows" $PY -m benchmarks.tag_scaling \
        --backends ${TAG_BACKENDS:-cuda,torch} --device cuda --training-steps 0 ${TAG_ARGS:-}
}

phase_warpdrive() {
    # WarpDrive's wheels (.whl/wd) go to their own folder: its wheel ships a top-level `tests` package,
    # which would hide msrl's tests from pytest's imports.
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-wd \
        .whl/wd/*.whl >>"$OUT/setup.log" 2>&1
    PYTHONPATH="/tmp/site-wd:$PYTHONPATH" bounded "${WD_LIMIT:-200}" "$OUT/bench.log" "warpdrive" \
        $PY -m benchmarks.warpdrive ${WD_ARGS:-}
}

# A phase named with a trailing + runs beside the ones after it (e.g. presets+ tests).
for phase in "$@"; do
    case $phase in
    *+)
        say "== ${phase%+} (beside what follows)"
        "phase_${phase%+}" &
        ;;
    *)
        say "== $phase"
        "phase_$phase"
        ;;
    esac
done
wait
wait_pycuda
say "done"
cat "$OUT/summary.txt"
