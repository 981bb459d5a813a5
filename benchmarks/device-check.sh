#!/usr/bin/env bash
# One pass of the device path on a machine with a GPU, PyCUDA and (for the comparison) PyTorch:
# kernels build, device tests, one profiled gradient, a training run, the benchmark table.
# Everything goes to OUT/all.tgz; the benchmark table is printed last.
#     benchmarks/device-check.sh OUT [NETS] [WHAT]     WHAT: any of tests,profile,ncu,train,bench
set -uo pipefail
out=${1:?output folder}
nets=${2:-log-example,lenet-mnist,local-rgb}
what=${3:-tests,profile,ncu,train,bench}
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
bench_dir=shared/bench
[ -d "$bench_dir" ] || bench_dir=../shared/bench
has() { case ",$what," in *",$1,"*) return 0;; esac; return 1; }
t0=$(date +%s)
if has tests; then
    python3 -m pytest -q -p no:cacheprovider tests/test_cu_compile.py tests/test_device_emulated.py \
        tests/test_device_backend.py > "$work/tests.log" 2>&1
    echo "tests: $(tail -1 "$work/tests.log") ($(( $(date +%s) - t0 )) s)"
fi
if has profile; then
    python3 benchmarks/gpu.py --bench-dir "$bench_dir" --sync-check lenet-mnist > "$work/sync-check.log" 2>&1
fi
if has ncu && command -v ncu > /dev/null; then
    timeout 180 ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section Occupancy --section LaunchStats --csv \
        python3 benchmarks/gpu.py --bench-dir "$bench_dir" --profile lenet-mnist \
        > "$work/ncu-lenet-mnist.csv" 2> "$work/ncu.err"
    echo "ncu: exit $? ($(wc -l < "$work/ncu-lenet-mnist.csv") lines)"
fi
if has train; then
    ts=$(date +%s)
    python3 -m convnet run --device cuda --seed 1 --quiet --out "$work/train" \
        "$bench_dir/lenet-mnist-split.ctl" > "$work/train.log" 2>&1
    echo "train: exit $? ($(( $(date +%s) - ts )) s wall)"
    grep -i -E "Annealing:|Refinement:|misclassification" "$work/train/CONVNET.LOG" | tail -8
fi
if has bench; then
    python3 benchmarks/gpu.py --bench-dir "$bench_dir" --no-host --nets "$nets" --out "$work/bench" \
        > "$work/bench.log" 2>&1
    echo "bench: exit $?"
fi
tar czf "$out/all.tgz" -C "$work" .
echo "total $(( $(date +%s) - t0 )) s"
if has bench; then sed -n '/^net /,$p' "$work/bench.log"; tail -3 "$work/bench.log" | grep -i error; fi
