#!/usr/bin/env bash
# One command for a GPU machine (../shared/reference/gpu.md): install the wheels that travelled in .whl/, build the
# compiled core, run the GPU-relevant tests, run benchmarks/gpu_pipeline.py; logs and a JSON of the figures go to
# $OUT (default ./gpu-out): all.log (every step's output), steps.log, two JUnit files and gpu_pipeline.json (a device
# run brings back 8 files at most). Every step runs under its own time limit, also when one before it failed; the
# exit status is the first failure.
#   Here, before the run:  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl \
#       nvidia-nvimgcodec-cu13 nvidia-nvjpeg crc32c simplejpeg && pip wheel --no-deps tfrecord==1.14.6 -w .whl
#   (and an older nvImageCodec, e.g. nvidia-nvimgcodec-cu13==0.6.0.32, into .whl-old/ for the version checks)
#   There:                 bash benchmarks/gpu_check.sh   (5-6 minutes on an H100 machine; SECONDS_PER_ROW=5 by default)
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
status=0
step() {  # step NAME SECONDS COMMAND...: run under a time limit, log to $OUT/all.log, remember the first failure
  local name=$1 limit=$2; shift 2
  echo "== $name: $*" | tee -a "$OUT/steps.log"
  echo "==== $name: $*" >> "$OUT/all.log"
  timeout -k 5 "$limit" "$@" > "$OUT/.step.log" 2>&1; local rc=$?
  cat "$OUT/.step.log" >> "$OUT/all.log"; tail -8 "$OUT/.step.log"; rm -f "$OUT/.step.log"
  echo "== $name: exit $rc$([ $rc -eq 124 ] && echo " (over its ${limit}s)")" | tee -a "$OUT/steps.log"
  if [ $rc -ne 0 ] && [ $status -eq 0 ]; then status=$rc; fi
}
if ls .whl/*.whl > /dev/null 2>&1; then
  step install 120 python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
fi
if ls .whl-old/*.whl > /dev/null 2>&1; then  # an older nvImageCodec beside it, for the version checks
  step install-old 120 python3 -m pip install -q --no-index --no-deps --target /tmp/site-old .whl-old/*.whl
fi
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export LD_LIBRARY_PATH=/tmp/site/nvidia/cu13/lib:/tmp/site/nvidia/cu12/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
step build 120 python3 setup.py -q build_ext --inplace
step versions 60 python3 -c "import torch, tfr_torch; from tfr_torch.images import _nvimgcodec; print(torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA'); print(tfr_torch.image_backends()); print(_nvimgcodec.describe(0))"
step probe 60 python3 -c "
import nvidia.nvimgcodec as n
print(getattr(n, '__version__', '?'), [x for x in dir(n) if not x.startswith('_')])
for k in ('ColorSpec', 'BackendKind', 'LoadHintPolicy', 'ProcessingStatus', 'DecodeSource', 'Region'):
    print(k, list(getattr(getattr(n, k, None), '__members__', {})) or getattr(n, k, None).__doc__ if hasattr(n, k) else 'absent')
print(n.Decoder.__init__.__doc__); print(n.Decoder.decode.__doc__)"
step real-gpu 120 python3 -m pytest -q -n 4 -rP -p no:cacheprovider tests/test_gpu_real.py --junitxml="$OUT/real-gpu.xml"
if [ -d /tmp/site-old ]; then
  step real-gpu-old 70 env PYTHONPATH=$PWD:/tmp/site-old:/tmp/site python3 -m pytest -q -n 4 -rP -p no:cacheprovider \
    tests/test_gpu_real.py -k "contract or cut or refuses or region"
fi
step tests 90 python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_images.py tests/test_gpu_decode.py \
  tests/test_image_loader.py tests/test_gpu_bench.py tests/test_dataset.py tests/test_gpu_review_audit.py \
  tests/test_device_loader_audit.py tests/test_images_audit.py --junitxml="$OUT/tests.xml"
step profile 45 python3 benchmarks/gpu_profile.py
step kernels 30 python3 benchmarks/pixel_kernels.py --repeat 100 --rounds 3
step bench 280 python3 benchmarks/gpu_pipeline.py --images 8192 --seconds "${SECONDS_PER_ROW:-5}" --json "$OUT/gpu_pipeline.json"
exit $status
