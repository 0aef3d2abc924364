# The two set-up commands of the README: `make demo` and `make test`. Each creates or refreshes .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-full clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# An editable install leaves the sources uncompiled, and where PYTHONDONTWRITEBYTECODE is set every process would
# compile them again (0.3 s of each command's start): compileall writes the bytecode once, as pip does for a wheel.
COMPILE := $(BIN)/python -m compileall -q npu_sim kernels

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	$(COMPILE)
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	$(COMPILE)
	touch $@ $(VENV)/.installed-run $(VENV)/.installed-report

# The report needs onnxruntime for its float reference: the 'report' extra.
$(VENV)/.installed-report: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[report]'
	$(COMPILE)
	touch $@ $(VENV)/.installed-run

# The demo is the accuracy report: the committed demo model on its 360 held-out digits against its float model,
# with check findings, latency, sensitivity ranking, int16 advisor, the fix re-quantized and measured.
# (No training images are bundled: the demo re-quantizes on its first 180 held-out digits.)
demo: $(VENV)/.installed-report
	@mkdir -p build/demo
	$(BIN)/npu-sim report models/demo/digits_cnn.qdq.onnx --float models/demo/digits_cnn.float.onnx \
		--data models/demo/digits_test.npz --top 3 --html build/demo/report.html --json build/demo/report.json \
		--overrides build/demo/fix.json --requantize models/demo/digits_test.npz --calib-limit 180 \
		--fixed-model build/demo/digits_cnn.fixed.qdq.onnx
	@echo "open build/demo/report.html"

# Every test, each property test with an eighth of its random examples, the minute-long tests marked `full` left
# out (tests/budget.py).
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n auto -m "not full"

# What CI runs besides: every test with every example, the `full` ones included, then the full mutation fuzzer
# (1,000 seeded mutants through every command and board, against onnx's checker and onnxruntime; docs/TESTING.md),
# which exits non-zero on any finding.
test-full: $(VENV)/.installed-test
	NPU_SIM_TESTS=full $(BIN)/python -m pytest -q -n auto
	$(BIN)/python -m tests.mutant_runner --count 1000 --seed 1

clean:
	rm -rf $(VENV) build
