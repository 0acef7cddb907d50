#!/usr/bin/env bash
# The CUDA paths, on a lent GPU machine whose image has torch but no network and no
# torchcanary: the claims and the bench with CUDA-event timing and the CUDA probes
# (`--baseline current --candidate current` on that torch), then the drill job on nccl
# under torchrun. No test needs a GPU; this is what checks the paths they cannot.
#
# Prepare here, where the package index is (wheels travel in .whl/, which git ignores):
#   .venv/bin/python -m pip wheel -q --no-deps . -w .whl
#   .venv/bin/python -m pip download -q --no-deps rich platformdirs markdown-it-py mdurl pygments -d .whl
# Then on the device, with .whl carried: bash benchmarks/device_check.sh (writes to $OUT,
# else ./device-check)
set -uo pipefail
out="${OUT:-device-check}"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --target "$out/site" .whl/*.whl
export PYTHONPATH="$PWD/$out/site"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

# The image's torch is not 2.14: name the release whose claims are checked.
timeout 420 python3 -m torchcanary.cli run --baseline current --candidate current \
  --release 2.14 --only claims,bench --budget 120s --probe-timeout 60 \
  --output "$out/run" > "$out/run.log" 2>&1
echo "torchcanary run exit $? (0 go, 1 no-go, other: broken)"
tail -n 40 "$out/run.log"

# The drill job on nccl: one rank, a few steps, a checkpoint.
timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
  -m torchcanary.worker.drill.builtin_job --steps 6 --backend nccl --events-dir "$out/events" \
  --ckpt-dir "$out/ckpt" > "$out/drill.log" 2>&1
echo "drill job on nccl exit $?"
tail -n 20 "$out/drill.log"

# Units hold the node's GPUs (issue 30): a one-node local Ray cluster on this machine's real
# GPUs, a fleet run on it, then each unit's record (what it asked for, its
# CUDA_VISIBLE_DEVICES, Ray's ids, torch's count and names per environment); again with
# --fleet-gpus 1. Needs Ray in the image (or its wheel in .whl/); without it: not checked.
if python3 -c "import ray" 2>/dev/null; then
  ray_dir="$(mktemp -d /tmp/tcray-XXXX)"
  python3 -m ray.scripts.scripts start --head --disable-usage-stats --include-dashboard=false \
    --temp-dir="$ray_dir" > "$out/ray-start.log" 2>&1
  for gpus in all 1; do
    flags=()
    [ "$gpus" = all ] || flags=(--fleet-gpus "$gpus")
    timeout 420 python3 -m torchcanary.cli run --fleet auto --baseline current \
      --candidate current --release 2.14 --only claims --probes 'sanity.*' --probe-timeout 60 \
      "${flags[@]}" --output "$out/fleet-gpus-$gpus" > "$out/fleet-gpus-$gpus.log" 2>&1
    echo "torchcanary run --fleet auto (GPUs: $gpus) exit $?"
    python3 - "$out/fleet-gpus-$gpus/results.json" <<'PY'
import json, sys
for unit in json.load(open(sys.argv[1]))["fleet"]["units"]:
    devices = unit["devices"]
    print(unit["profile"], unit["section"], unit["status"], unit["error"] or "")
    print("  asked", devices.get("asked"), "ray", devices.get("unit", {}).get("ray_version"),
          "ids", devices.get("unit", {}).get("accelerator_ids"),
          "variables", devices.get("unit", {}).get("variables"))
    for role, seen in (devices.get("roles") or {}).items():
        print(f"  {role}: torch {seen.get('count')} {seen.get('names')} {seen.get('variables')}")
PY
  done
  python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1
else
  echo "fleet GPUs: not checked: Ray is not installed in this image (carry its wheel in .whl/)"
fi
