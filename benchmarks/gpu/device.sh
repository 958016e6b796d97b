#!/usr/bin/env bash
# The GPU benchmark's steps, here and on the lent H200 (no network there; see README.md beside).
#
#   bash benchmarks/gpu/device.sh pack          # here, once: vLLM 0.20 bundle + slogate's wheels + models
#   bash benchmarks/gpu/device.sh receive partK # on the GPU, part1 .. part5 then "slogate", back to back
#   bash benchmarks/gpu/device.sh setup         # on the GPU: install, check, place the model directories
#   bash benchmarks/gpu/device.sh sweep ARGS    # on the GPU: benchmarks/gpu/sweep.py with ARGS, tar to $OUT
#   bash benchmarks/gpu/device.sh capacity ARGS # on the GPU: `slogate capacity ARGS --out /tmp/gpu-capacity`, tar to $OUT
#                                               # (CAPACITY_RUN=name: --out /tmp/gpu-capacity/name, for several searches)
#   bash benchmarks/gpu/device.sh bench SCRIPT ARGS # on the GPU machine's CPUs: python3 benchmarks/SCRIPT ARGS (from /tmp;
#                                               # write under /tmp/gpu-bench), /tmp/gpu-bench tarred to $OUT
#   bash benchmarks/gpu/device.sh serve PROFILE [PORT] # on the GPU: launch PROFILE in the background (it outlives
#                                               # the call while the machine is held), return once it is healthy
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SHARED="${SLOGATE_GPU_RECIPE:-$ROOT/../shared/gpu}"
GPU_DIR="$ROOT/.gpu"                       # git-ignored (.git/info/exclude), named in the device call's carry
SITE=/tmp/site                             # where ../shared/gpu/assemble.sh installs vLLM 0.20
EXTRA_SITE=/tmp/slogate-site               # slogate's dependencies that the machine lacks
export SLOGATE_HOME=/tmp/slogate           # profiles' {models} -> /tmp/slogate/models
# Heavy wheels the GPU image already has (/work/.library/device/KINDS.md lists it: numpy, pillow,
# tokenizers, huggingface_hub, matplotlib and its stack), and test-only ones. `setup` installs
# only what the machine lacks anyway; this keeps the carried part small.
SKIP='^(numpy|pillow|tokenizers|huggingface_hub|hf_xet|fsspec|matplotlib|fonttools|kiwisolver|contourpy|pytest|pluggy|iniconfig|setuptools|pygments)-'

gpu_env() {
  # slogate is not pip-installed there: lay the checkout out as installed (pyproject.toml's
  # package-dir: slo/ is slogate.slo, launch/ slogate.launch, locustfiles/ slogate.locustfiles).
  local pkg=/tmp/slogate-pkg/slogate
  rm -rf /tmp/slogate-pkg && mkdir -p "$pkg"
  local f
  for f in "$ROOT"/slogate/*; do ln -s "$f" "$pkg/"; done  # its modules and subpackages (commands/)
  ln -s "$ROOT/slo" "$pkg/slo" && ln -s "$ROOT/launch" "$pkg/launch" && ln -s "$ROOT/locustfiles" "$pkg/locustfiles"
  export PYTHONPATH="$SITE:$EXTRA_SITE:/tmp/slogate-pkg" HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
}

case "${1:?usage: device.sh pack|receive K|setup|sweep ARGS|capacity ARGS|bench SCRIPT ARGS|serve PROFILE [PORT]}" in
pack)
  py="${PYTHON:-$ROOT/.venv/bin/python}"
  bash "$SHARED/fetch.sh" "$GPU_DIR"
  rm -rf "$GPU_DIR/stage" && mkdir -p "$GPU_DIR/stage/wheels" "$GPU_DIR/stage/models"
  plat=(--platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
  # slogate's runtime dependencies (pyproject.toml) and matplotlib for the chart, built for cp312.
  deps=$("$py" -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["plot"]))')
  mapfile -t reqs <<<"$deps"
  (cd "$ROOT" && "$py" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
      -d "$GPU_DIR/wheels-slogate" "${reqs[@]}" 2>&1 | grep -v "^WARNING: Location" || true)
  find "$GPU_DIR/wheels-slogate" -name '*.whl' -printf '%f\n' | grep -Ev "$SKIP" \
    | while read -r w; do cp "$GPU_DIR/wheels-slogate/$w" "$GPU_DIR/stage/wheels/"; done
  # vLLM 0.20 imports compressed-tensors to resolve any quantization config (tuned-awq); the
  # recipe's bundle lacks it and its one missing dependency, loguru.
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
      -d "$GPU_DIR/stage/wheels" compressed-tensors==0.15.0.1 loguru 2>&1 | grep -v "^WARNING: Location" || true
  "$py" "$SHARED/make_model.py" "$GPU_DIR/stage/models/qwen25-7b-dummy" --no-check
  "$py" "$ROOT/benchmarks/gpu/prepare_models.py" "$GPU_DIR/stage/models/qwen25-7b-dummy" \
    "$GPU_DIR/stage/models/qwen25-7b-awq-dummy"
  tar --format=gnu -C "$GPU_DIR/stage" -cf "$GPU_DIR/parts/slogate.tar" .
  rm -rf "$GPU_DIR/stage"
  ls -la "$GPU_DIR/parts"
  ;;
receive)
  mkdir -p /tmp/parts && cp "$GPU_DIR/parts/${2:?part1 .. part5 or slogate}.tar" /tmp/parts/ && ls -la /tmp/parts
  ;;
setup)
  tar -xf /tmp/parts/part5.tar -C /tmp/parts
  bash /tmp/parts/assemble.sh /tmp/parts "$SITE" 2>&1 | tail -6
  mkdir -p /tmp/slogate-extra "$SLOGATE_HOME/models" && tar -xf /tmp/parts/slogate.tar -C /tmp/slogate-extra
  cp -r /tmp/slogate-extra/models/. "$SLOGATE_HOME/models/"
  gpu_env
  # Install only the wheels whose distribution the machine (with the vLLM bundle) lacks, so that
  # nothing vLLM runs on is shadowed by another version.
  mapfile -t missing < <(python3 - /tmp/slogate-extra/wheels <<'EOF'
import importlib.metadata as md, pathlib, sys
for whl in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    try:
        md.distribution(whl.name.split("-")[0])
    except md.PackageNotFoundError:
        print(whl)
EOF
)
  echo "installing ${#missing[@]} wheels the machine lacks: $(printf '%s ' "${missing[@]##*/}" | sed 's/-[^ ]*//g')"
  [ "${#missing[@]}" -eq 0 ] || python3 -m pip install -q --no-index --no-deps --no-compile --target "$EXTRA_SITE" "${missing[@]}"
  cd /tmp  # the checkout's own slogate/ folder, as the cwd on the path, would hide slogate.slo
  python3 -c "import locust, gevent, geventhttpclient, hdrh, slack_sdk, yaml, prometheus_client, openai, tokenizers
import slogate.slo.plugin, slogate.launch.launcher
print('SLOGATE_SETUP_OK locust', locust.__version__)"
  python3 - "$ROOT"/benchmarks/gpu/profiles/h200-*.yaml <<'EOF'
import sys
from slogate.launch.installation import find_vllm
from slogate.launch.profile import load_profile
from slogate.launch.validate import validate
profiles = [load_profile(p) for p in sys.argv[1:]]
print("vLLM", validate(find_vllm(), *profiles), "accepts", ", ".join(p.name for p in profiles))
EOF
  ;;
sweep)
  shift
  gpu_env
  out=/tmp/gpu-results
  code=0
  python3 "$ROOT/benchmarks/gpu/sweep.py" --out "$out" "$@" || code=$?
  [ -z "${OUT:-}" ] || cp "$out.tar.gz" "$OUT/"
  exit $code
  ;;
capacity)
  shift
  gpu_env
  out=/tmp/gpu-capacity
  code=0
  run_out="$out${CAPACITY_RUN:+/$CAPACITY_RUN}"
  # From /tmp: the checkout's own slogate/ folder, on the path as the cwd, would hide slogate.slo
  # (gpu_env lays the package out in /tmp/slogate-pkg). Paths in ARGS must be absolute.
  (cd /tmp && python3 -m slogate.cli capacity --out "$run_out" "$@") || code=$?
  # Every step's report stays in the archive; the hlog time series are left out (size).
  tar --exclude='*.hlog' -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
  [ -z "${OUT:-}" ] || cp "$out.tar.gz" "$OUT/"
  exit $code
  ;;
bench)
  gpu_env
  script="${2:?bench SCRIPT ARGS}"
  shift 2
  mkdir -p /tmp/gpu-bench
  code=0
  (cd /tmp && python3 "$ROOT/benchmarks/$script" "$@") || code=$?
  tar -czf /tmp/gpu-bench.tar.gz -C /tmp gpu-bench
  [ -z "${OUT:-}" ] || cp /tmp/gpu-bench.tar.gz "$OUT/"
  exit $code
  ;;
serve)
  gpu_env
  port="${3:-8000}" profile="$(realpath "${2:?serve PROFILE [PORT]}")"
  (cd /tmp && setsid nohup python3 -m slogate.cli launch --port "$port" "$profile" \
    >/tmp/serve.log 2>&1 </dev/null & echo $! >/tmp/serve.pid)
  for _ in $(seq 420); do
    if ! kill -0 "$(cat /tmp/serve.pid)" 2>/dev/null; then  # the launcher died: no point waiting
      tail -20 /tmp/serve.log; echo "device.sh: $2 exited before it was healthy" >&2; exit 4
    fi
    # The launcher's own health wait says so: a python3 poll of /health here did not see the server
    # healthy within the call's 540 s on 2026-12-06, while the launcher had said so after 92 s.
    if grep -q "healthy after" /tmp/serve.log; then
      echo "serving $2 on port $port after $SECONDS s"; exit 0
    fi
    sleep 1
  done
  tail -20 /tmp/serve.log; echo "device.sh: $2 not healthy after 420 s" >&2; exit 4
  ;;
*)
  echo "device.sh: unknown step $1" >&2; exit 2
  ;;
esac
