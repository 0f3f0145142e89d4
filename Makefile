# Two commands do everything on a fresh machine: `make serve` and `make test`.
BACKEND ?= cpu
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(BACKEND)
ARGS ?=

.PHONY: install serve prepare test test-fast lint bench soak clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install.sh
	BACKEND=$(BACKEND) VENV=$(VENV) bash scripts/install.sh

# SPECGATE_* environment variables (SPECGATE_PORT, SPECGATE_CONFIG, ...) are honoured.
serve: install
	$(VENV)/bin/specgate serve $(ARGS)

prepare: install
	$(VENV)/bin/specgate prepare

# The whole suite: lint and types, the fast tier, and the real vLLM tier.
test: install
	$(VENV)/bin/ruff check gateway engines policies sim tests bench
	$(VENV)/bin/mypy
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not real"

lint: install
	$(VENV)/bin/ruff check gateway engines policies sim tests bench
	$(VENV)/bin/mypy

# Benchmarks print figures (not tests); the routing report (simulator + real CPU
# sweep, bench/out/REPORT.md) runs last and prints the summary line.
bench: install
	$(PY) -m bench.gateway_overhead
	$(PY) -m bench.decision_latency
	$(PY) -m bench.report

# The soak run: 10 minutes of mixed traffic on real engines (bench/out/soak.md).
soak: install
	$(PY) -m bench.soak

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
