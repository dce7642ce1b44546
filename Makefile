PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test demo lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,plot]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check pipecat_summarizer tests examples benchmarks
	$(VENV)/bin/ruff format --check pipecat_summarizer tests examples benchmarks

demo: $(STAMP)
	$(VENV)/bin/pipecat-summarizer demo

clean:
	rm -rf $(VENV) out .pytest_cache
