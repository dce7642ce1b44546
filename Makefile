PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test demo lint clean fuzz

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Most tests wait on pipelines and servers, not the CPU: with four workers two cores were idle
# 40% of a run; six take a clean clone from ~325 s to ~275 s.
TEST_WORKERS ?= 6

test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS)

SEEDS ?= 200
# Seeds mostly sleep (compressed schedule time): twelve worker processes fit two cores.
JOBS ?= 12
fuzz: $(STAMP)  # the schedule fuzzer: SEEDS seeds from START (prints a replay command per failure)
	$(PY) -m tests.fuzz --seeds $(SEEDS) --start $(or $(START),0) --jobs $(JOBS)

lint: $(STAMP)
	$(VENV)/bin/ruff check pipecat_summarizer pipecat_summarizer_cli tests examples benchmarks
	$(VENV)/bin/ruff format --check pipecat_summarizer pipecat_summarizer_cli tests examples benchmarks
	$(VENV)/bin/mypy  # the package, configured in pyproject.toml [tool.mypy]
	$(VENV)/bin/hadolint Dockerfile

# The same call twice, calm and busy (the summarizer writing 40 tokens/s, a barge-in on half
# the answers), in one table, report and plot; offline. DEMO_ARGS adds flags (e.g. --seed 1).
# nutrition_call is shipped in the package (pipecat_summarizer_cli/replay/data/, probes included).
DEMO_ARGS ?=
demo: $(STAMP)
	$(VENV)/bin/pipecat-summarizer replay nutrition_call --compare-busy \
		--report out/report.json --plot out/plot.png $(DEMO_ARGS)

clean:
	rm -rf $(VENV) out .pytest_cache
