#!/usr/bin/env bash
# One command for a GPU machine (../shared/reference/gpu.md): install the wheels that travelled in .whl/, build the
# compiled core, run the GPU-relevant tests, run benchmarks/gpu_pipeline.py; logs and a JSON of the figures go to
# $OUT (default ./gpu-out). Every step runs even when one before it failed; the exit status is the first failure.
#   Here, before the run:  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl \
#       nvidia-nvimgcodec-cu13 nvidia-nvjpeg crc32c simplejpeg && pip wheel --no-deps tfrecord==1.14.6 -w .whl
#   (and an older nvImageCodec, e.g. nvidia-nvimgcodec-cu13==0.6.0.32, into .whl-old/ for the version checks)
#   There:                 bash benchmarks/gpu_check.sh   (about 5 minutes; SECONDS_PER_ROW=6 by default)
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
status=0
step() {  # step NAME COMMAND...: run, log to $OUT/NAME.log, remember the first failure
  local name=$1; shift
  echo "== $name: $*" | tee -a "$OUT/steps.log"
  "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name: exit $rc" | tee -a "$OUT/steps.log"
  tail -5 "$OUT/$name.log"
  if [ $rc -ne 0 ] && [ $status -eq 0 ]; then status=$rc; fi
}
if ls .whl/*.whl > /dev/null 2>&1; then
  step install python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
fi
if ls .whl-old/*.whl > /dev/null 2>&1; then  # an older nvImageCodec beside it, for the version checks
  step install-old python3 -m pip install -q --no-index --no-deps --target /tmp/site-old .whl-old/*.whl
fi
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export LD_LIBRARY_PATH=/tmp/site/nvidia/cu13/lib:/tmp/site/nvidia/cu12/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
step build python3 setup.py -q build_ext --inplace
step versions python3 -c "import torch, tfr_torch; from tfr_torch.images import _nvimgcodec; print(torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA'); print(tfr_torch.image_backends()); print(_nvimgcodec.describe(0))"
step real-gpu python3 -m pytest -q -n 4 -rP -p no:cacheprovider tests/test_gpu_real.py --junitxml="$OUT/real-gpu.xml"
if [ -d /tmp/site-old ]; then
  step real-gpu-old env PYTHONPATH=$PWD:/tmp/site-old:/tmp/site python3 -m pytest -q -n 4 -rP -p no:cacheprovider \
    tests/test_gpu_real.py -k "contract or cut or refuses or region"
fi
step tests python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_images.py tests/test_gpu_decode.py \
  tests/test_image_loader.py tests/test_gpu_bench.py tests/test_dataset.py tests/test_gpu_review_audit.py \
  tests/test_device_loader_audit.py tests/test_images_audit.py --junitxml="$OUT/tests.xml"
step profile python3 benchmarks/gpu_profile.py
step bench python3 benchmarks/gpu_pipeline.py --images 8192 --seconds "${SECONDS_PER_ROW:-6}" --json "$OUT/gpu_pipeline.json"
exit $status
