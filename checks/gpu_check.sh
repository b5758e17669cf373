#!/usr/bin/env bash
# The GPU check: the CUDA tests, then the DAG's stages on Multi30k with a cut training
# budget, written up in reports/gpu.json (checks/gpu_check.py does the work; this script sets up).
#
#   checks/gpu_check.sh --prepare          HERE, with PyPI: the wheels the GPU machine lacks into .whl/,
#                                         DVC's reading of dvc.yaml into .whl/stages.json, the
#                                         Multi30k EN/DE files into .m30k/ (both git-ignored)
#   checks/gpu_check.sh [ARGS]             ON THE GPU MACHINE (no registry): installs .whl/*.whl into
#                                         /tmp/site, then `python3 -m checks.gpu_check ARGS`
#   checks/gpu_check.sh --cpu-dry-run      on a CPU: the same plumbing on tiny data, nothing installed
#
# ARGS go to checks/gpu_check.py (`--help` there): --train-minutes, --out, --workdir, ...
set -euo pipefail
cd "$(dirname "$0")/.."

# What the GPU image (python 3.12, torch 2.11) lacks, pinned as requirements.txt and the venv have
# them, with their own missing needs (Requires-Dist checked by `prepare`). mlflow, dvc and prefect
# are not needed: MLflow is disabled and the stages run as plain modules.
WHEELS=(
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  typing-extensions==4.16.0
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
  pooch==1.9.0 platformdirs==4.14.8
  sacremoses==0.2.0 pysbd==0.3.4
)
MIRROR_SRC="${MULTI30K_MIRROR:-../shared/multi30k}"

prepare() {
  rm -rf .whl .m30k
  mkdir -p .whl .m30k
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
  echo "wheels and what they require (the GPU image has the rest: numpy pandas pyarrow fsspec"
  echo "huggingface-hub xxhash requests filelock packaging pyyaml tqdm regex click joblib):"
  for w in .whl/*.whl; do
    echo "  $(basename "$w"): $(unzip -p "$w" '*.dist-info/METADATA' | grep '^Requires-Dist' \
      | grep -v 'extra ==' | sed 's/^Requires-Dist: //' | tr '\n' ' ')"
  done
  for split in train val test_2016_flickr test_2017_flickr; do
    cp "$MIRROR_SRC/$split.en.gz" "$MIRROR_SRC/$split.de.gz" .m30k/
  done
  python3 -c 'from checks.gpu_check import write_stage_plan; write_stage_plan()'  # needs DVC: here only
  du -sh .whl .m30k
}

case "${1:-}" in
  --prepare)
    prepare
    ;;
  --cpu-dry-run)
    exec python3 -m checks.gpu_check "$@"
    ;;
  *)
    if compgen -G ".whl/*.whl" >/dev/null; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
      export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    exec python3 -m checks.gpu_check "$@"
    ;;
esac
