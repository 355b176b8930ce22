# Two commands for a newcomer: `make demo` and `make test`. Both install what they need into .venv.
# An installed torch is never replaced: .venv sees the system's packages, and torch is installed only when no
# torch imports at all (TORCH_SPEC, default the CPU build torch==2.13.0; override e.g. TORCH_SPEC="torch==2.5.1").
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
PYTEST_ARGS ?=

.PHONY: demo test docs test-random test-sanitizers install install-test test-xla test-images test-min bench golden protos clean fuzz fuzz-ci lint

$(PY):
	$(PYTHON) -m venv --system-site-packages $(VENV)

# What an editable install depends on: a change to any of these reinstalls (and rebuilds the compiled core);
# otherwise `make demo` / `make test` find their stamp files up to date and install nothing.
INSTALL_DEPS := pyproject.toml setup.py $(wildcard tfr_torch/_native/src/*.c tfr_torch/_native/src/*.h)

# torch first (only if missing), then the package pinned to the torch that is there, so pip never swaps it.
$(VENV)/.installed: $(PY) $(INSTALL_DEPS)
	@$(PY) -c "import torch" 2>/dev/null || { echo "installing $(TORCH_SPEC)"; $(PIP) install "$(TORCH_SPEC)"; }
	@$(PY) -c "from importlib.metadata import version; print('torch==' + version('torch'))" > $(VENV)/torch-constraint.txt
	$(PIP) install -c $(VENV)/torch-constraint.txt -e .
	@touch $@

# The test tools at the versions in constraints/test.txt (a fresh machine gets what passed, not that day's PyPI;
# its header says how to update it on purpose).
TEST_CONSTRAINTS := constraints/test.txt

$(VENV)/.installed-test: $(VENV)/.installed $(wildcard $(TEST_CONSTRAINTS))
	$(PIP) install -c $(VENV)/torch-constraint.txt -c $(TEST_CONSTRAINTS) -e ".[test]"
	@touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

demo: install
	$(PY) examples/quickstart.py

# --durations: the slowest tests are listed at the end of every run (a test that needs more than a few seconds says
# why in its docstring; tests/conftest.py names any that does not).
test: install-test
	$(PY) -m pytest -q --durations=15 $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test-sanitizers
	@$(MAKE) --no-print-directory fuzz-ci

# The suite in a shuffled order (pytest-random-order: the test files in a random order, the tests of each file
# shuffled): a test that passes only after another one, or leaves state that another one needs, fails here. (One
# global bucket would also interleave files, which sets up each file's module fixtures -- servers, Ray, the resume
# jobs -- over and over.) The seed is printed first; rerun that order with `make test-random SEED=N`.
SEED ?=
test-random: install-test
	@seed=$${SEED:-$$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')}; echo "test-random: SEED=$$seed"; \
	$(PY) -m pytest -q -p no:cacheprovider --random-order-bucket=module --random-order-seed=$$seed --durations=15 \
	  $(PYTEST_ARGS)

# The lint and type gate alone ([tool.ruff] and [tool.mypy] in pyproject.toml); `make test` runs both as tests
# (tests/test_lint.py, tests/test_typing.py).
lint: install-test
	$(PY) -m ruff check .
	$(PY) -m mypy

# The compiled core built with AddressSanitizer + UndefinedBehaviorSanitizer (build/sanitizers, never installed),
# loaded through TFR_TORCH_NATIVE_LIB, runs the kernel, decode, differential and corruption tests: any report fails.
# allocator_may_return_null: an allocation refused under the corruption tests' memory cap returns NULL (MemoryError,
# as without ASan) instead of aborting the run.
# Skipped with a notice where the compiler has no sanitizer runtime.
SANITIZE := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all -O1 -g
CC ?= cc
test-sanitizers: install-test
	@asan=$$($(CC) -print-file-name=libasan.so); ubsan=$$($(CC) -print-file-name=libubsan.so); \
	if [ ! -e "$$asan" ] || [ ! -e "$$ubsan" ]; then echo "test-sanitizers: skipped ($(CC) has no libasan/libubsan)"; exit 0; fi; \
	rm -rf build/sanitizers build/sanitizers-tmp; mkdir -p build; \
	TFR_TORCH_CFLAGS="$(SANITIZE)" TFR_TORCH_LDFLAGS="-fsanitize=address,undefined" \
	  $(PY) setup.py -q build_ext --build-lib build/sanitizers --build-temp build/sanitizers-tmp > build/sanitizers.log 2>&1 \
	  || { cat build/sanitizers.log; exit 1; }; \
	so=$$(find build/sanitizers -name '_core*.so'); \
	echo "test-sanitizers: $$so under ASan + UBSan"; \
	LD_PRELOAD="$$asan $$ubsan" ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  TFR_TORCH_NATIVE_LIB=$$so $(PY) -m pytest -q -p no:cacheprovider tests/test_native.py $(wildcard tests/test_parse*.py) \
	  tests/test_corruption.py tests/test_transport.py tests/test_dataset.py tests/test_seek.py tests/test_gpu_decode.py \
	  tests/test_image_steps.py tests/test_native_planes.py tests/test_native_audit.py -k "(native or png_kernel) and not inflate"

# The torch_xla path (tests/test_xla.py: replicas on PJRT CPU devices, the TPU example) in its own virtualenv:
# torch-xla 2.9.0 needs torch 2.9.0, whose PyPI wheel brings its CUDA libraries (about 7 GB installed). Not part
# of `make test`.
XLA_VENV ?= .venv-xla
XLA_PY := $(XLA_VENV)/bin/python
XLA_SPEC ?= torch==2.9.0 torch-xla==2.9.0

$(XLA_VENV)/.installed-xla: $(INSTALL_DEPS) $(wildcard $(TEST_CONSTRAINTS))
	test -x $(XLA_PY) || $(PYTHON) -m venv $(XLA_VENV)
	$(XLA_PY) -m pip --disable-pip-version-check -q install $(XLA_SPEC)
	printf '%s\n' $(XLA_SPEC) > $(XLA_VENV)/xla-constraint.txt
	$(XLA_PY) -m pip --disable-pip-version-check -q install -c $(XLA_VENV)/xla-constraint.txt -c $(TEST_CONSTRAINTS) -e . pytest
	@touch $@

test-xla: $(XLA_VENV)/.installed-xla
	PJRT_DEVICE=CPU $(XLA_PY) -m pytest -q -p no:cacheprovider tests/test_xla.py $(PYTEST_ARGS)

# The image decoders beside a CUDA torch (tests/test_images.py and the image tests of tests/test_convert.py with the
# torchvision and TorchCodec decoders; the corrupt-PNG tests run the decode in a subprocess). Its own virtualenv:
# torch 2.14.1 + torchvision 0.29.1 + torchcodec 0.17.0 are about 5.5 GB. The package is taken from the source tree
# (PYTHONPATH), so nothing is built or installed into it there. Not part of `make test`.
IMAGES_VENV ?= .venv-images
IMAGES_PY := $(IMAGES_VENV)/bin/python
IMAGES_SPEC ?= torch==2.14.1 torchvision==0.29.1 torchcodec==0.17.0

$(IMAGES_VENV)/.installed-images: pyproject.toml
	test -x $(IMAGES_PY) || $(PYTHON) -m venv $(IMAGES_VENV)
	$(IMAGES_PY) -m pip --disable-pip-version-check -q install $(IMAGES_SPEC)
	printf '%s\n' $(IMAGES_SPEC) > $(IMAGES_VENV)/images-constraint.txt
	$(IMAGES_PY) -m pip --disable-pip-version-check -q install -c $(IMAGES_VENV)/images-constraint.txt \
		"numpy>=1.23" "protobuf>=4.25" "crc32c>=2.3" "pillow>=9" "tqdm>=4.60" "pytest>=7" "hypothesis>=6"
	@touch $@

test-images: $(IMAGES_VENV)/.installed-images
	PYTHONPATH=$(CURDIR) $(IMAGES_PY) -m pytest -q -p no:cacheprovider tests/test_images.py tests/test_convert.py \
		-k "image or mode or decode" $(PYTEST_ARGS)

# The lowest versions pyproject.toml admits for the package's own dependencies (constraints/min.txt: numpy, protobuf,
# crc32c, Pillow, tqdm), beside the torch .venv has, in a virtualenv of their own without the test extra's
# integrations (Ray, datasets, torchdata, s3fs, moto...): their tests skip, and the files that need them to be
# collected at all are left out (MIN_IGNORE). It found Pillow 9's 16-bit PNGs refused and protobuf 4.21-4.24 failing.
# The package is taken from the source tree (PYTHONPATH), with the compiled core `make install` built. Not part of
# `make test`.
MIN_VENV ?= .venv-min
MIN_PY := $(MIN_VENV)/bin/python
MIN_IGNORE := --ignore=tests/test_docs.py --ignore=tests/test_elastic.py --ignore=tests/test_elastic_ddp.py \
	--ignore=tests/test_resume.py --ignore=tests/test_sampler.py

$(MIN_VENV)/.installed-min: $(VENV)/.installed constraints/min.txt
	test -x $(MIN_PY) || $(PYTHON) -m venv $(MIN_VENV)
	$(MIN_PY) -m pip --disable-pip-version-check -q install -c $(VENV)/torch-constraint.txt -c constraints/min.txt \
		torch numpy protobuf crc32c pillow tqdm pytest hypothesis
	@touch $@

test-min: $(MIN_VENV)/.installed-min
	PYTHONPATH=$(CURDIR) $(MIN_PY) -m pytest -q -p no:cacheprovider $(MIN_IGNORE) $(PYTEST_ARGS)

# The documentation site (docs/, mkdocs.yml): the benchmark plots are drawn from the committed results
# (benchmarks/results/*.json, written by benchmarks/run.py --json and benchmarks/gpu_pipeline.py --json) into
# docs/plots/, then the site is built into site/ with warnings as errors. Neither folder is committed. The doc tests
# (tests/test_docs.py, part of `make test`) need none of these tools: they read the markdown files directly.
DOCS_CONSTRAINTS := constraints/docs.txt
$(VENV)/.installed-docs: $(VENV)/.installed $(DOCS_CONSTRAINTS)
	$(PIP) install -c $(VENV)/torch-constraint.txt -c $(DOCS_CONSTRAINTS) -e ".[docs]"
	@touch $@

docs: $(VENV)/.installed-docs
	rm -rf docs/plots
	$(PY) -m benchmarks.report --plot benchmarks/results/*.json --out docs/plots
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --clean

bench: install-test
	$(PY) benchmarks/run.py

# Coverage-guided fuzzing of every decoder (fuzz/README.md): FUZZ_SECONDS per harness, executions and coverage
# per harness printed, crashing inputs under build/fuzz/crashes/. fuzz-ci is the short, seeded pass for CI
# (9 harnesses x 30 s, about 7 minutes with start-up); `make test` runs it last, so a regression fails CI.
FUZZ_SECONDS ?= 480
$(VENV)/.installed-fuzz: $(VENV)/.installed-test
	$(PIP) install -c $(VENV)/torch-constraint.txt -c $(TEST_CONSTRAINTS) -e ".[fuzz]"
	@touch $@

fuzz: $(VENV)/.installed-fuzz
	$(PY) fuzz/run.py --seconds $(FUZZ_SECONDS)

fuzz-ci: $(VENV)/.installed-fuzz
	$(PY) fuzz/run.py --seconds 30 --seed 1

# Regenerate tfr_torch/format/_proto/*_pb2.py and their *_pb2.pyi stubs from protos/ (needs grpcio-tools, installed
# by install-test); tests/test_protos.py fails when the committed ones are stale.
protos: install-test
	$(PY) protos/generate.py

# Golden files need real TensorFlow, in a separate virtualenv (about 1.6 GB): see tests/data/make_golden.py.
golden:
	@echo "run: <venv with tensorflow-cpu==2.21.0>/bin/python tests/data/make_golden.py"

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis site docs/plots
