#!/usr/bin/env bash
# The CUDA path for real, on a machine with one NVIDIA GPU: sweeps through inductor in bf16
# and fp32, held to the CPU references, and a wrong backend that must fail the output check.
#
#   benchmarks/cuda_check.sh tiny  [OUT]   # a sample of the bundled tiny list
#   benchmarks/cuda_check.sh real GGUF [OUT]  # SmolLM2-135M-Instruct from its GGUF file
#
# It needs torch with CUDA, transformers, pytest-xdist and the plugin's other packages
# importable (PYTHONPATH may hold them); it runs from a folder of its own, so the repository's
# pytest settings do not apply. Each phase's rows are printed, a JSON object each, and kept in
# OUT with each sweep's output, as each sweep ends. DEVICE=cpu tries the script here.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PHASE=${1:?tiny or real}
if [ "$PHASE" = real ]; then
  GGUF=${2:?the GGUF file of SmolLM2-135M-Instruct}
  OUT=${3:-/tmp/cuda-check}
else
  OUT=${2:-/tmp/cuda-check}
fi
WORK=$(mktemp -d /tmp/cuda-check.XXXX)
mkdir -p "$OUT"
cp "$REPO/tests/backends_for_tests.py" "$WORK/"  # a run imports a test backend from its folder
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
export NEURONSUPPORT_CACHE="$WORK/cache"
cd "$WORK"
# the plugin from the repository where it is not installed (its pytest11 entry point)
PLUGIN=$(python3 -c "from importlib.metadata import entry_points as e
print('' if e(group='pytest11', name='neuronsupport') else '-p pytest_neuronsupport.plugin')")

sweep() {  # NAME DTYPE BACKEND LIST [pytest args...]
  local name=$1 dtype=$2 backend=$3 list=$4
  shift 4
  timeout "${SWEEP_TIMEOUT:-300}" python3 -m pytest $PLUGIN -p no:cacheprovider --neuron-sweep \
    --neuron-device "${DEVICE:-cuda}" --neuron-dtype "$dtype" --neuron-backend "$backend" \
    --neuron-models "$list" --neuron-results "$WORK/results-$name" --neuron-timeout 400 \
    -q -n 4 "$@" >"$OUT/$name.log" 2>&1 || true  # a FAIL row is a failed test: read the rows
  tail -n 3 "$OUT/$name.log"
  python3 - "$WORK/results-$name" "$OUT/rows-$PHASE.txt" <<'EOF'
import glob, json, sys
import pyarrow.parquet as pq

work, out = sys.argv[1:]
cols = ("model_id", "dtype", "backend", "result", "cpu_match", "fp64_error_device",
        "fp64_error_eager", "fp64_tolerance", "backend_compile_s", "wall_s", "notes", "error")
lines = []
for path in sorted(glob.glob(f"{work}/data/*/*.parquet")):
    table = pq.read_table(path)
    for row in table.to_pylist():
        shown = {c: row.get(c) for c in cols}
        check = json.loads(row.get("check") or "{}")
        shown["rule"] = check.get("rule")
        shown["error"] = (shown["error"] or "")[:300]
        lines.append(json.dumps(shown, default=str))
open(out, "a").write("".join(line + "\n" for line in lines))
print("\n".join(lines))
EOF
}

if [ "$PHASE" = tiny ]; then
  list="$REPO/model_lists/tiny.toml"
  sweep bf16-inductor bfloat16 inductor "$list" -k "llama and not 2core or gpt2 or bert-mlm or t5"
  sweep fp32-inductor float32 inductor "$list" -k "llama and not 2core"
  sweep bf16-swapped bfloat16 backends_for_tests:swapped_top_two_backend_for_tests "$list" \
    -k "llama and not 2core"
  sweep bf16-noise bfloat16 backends_for_tests:large_noise_backend_for_tests "$list" -k bert-mlm
else
  cat >"$WORK/real.toml" <<EOF
[[model]]
id = "HuggingFaceTB/SmolLM2-135M-Instruct"
path = "$GGUF"
EOF
  sweep real-bf16-inductor bfloat16 inductor "$WORK/real.toml"
  sweep real-fp32-inductor float32 inductor "$WORK/real.toml"
  sweep real-bf16-swapped bfloat16 backends_for_tests:swapped_top_two_backend_for_tests \
    "$WORK/real.toml"
fi
