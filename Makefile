# The two set-up commands of the README: `make demo` and `make test`. Each creates or refreshes .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@ $(VENV)/.installed-run

demo: $(VENV)/.installed-run
	$(BIN)/npu-sim lower models/demo/digits_cnn.qdq.onnx --input-shape input=1x1x8x8
	$(BIN)/npu-sim run models/demo/digits_cnn.qdq.onnx --input input=models/demo/digits_sample.npy --out build/demo --dump-all
	$(BIN)/python models/demo/score.py

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build
