# Two commands do everything on a fresh machine: `make serve` and `make test`.
BACKEND ?= cpu
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(BACKEND)
TEST_STAMP := $(VENV)/.installed-$(BACKEND)-test
ARGS ?=

LOAD_VENV ?= .venv-load
CLIENTS_VENV ?= .venv-clients

.PHONY: install install-test system-packages serve prepare test test-unit test-fast lint bench \
	bench-peer soak chaos loadtest clean train-drafters

# What serving needs: SpecGate and its engine backend.
install: $(STAMP)

$(STAMP): pyproject.toml scripts/install.sh
	BACKEND=$(BACKEND) VENV=$(VENV) bash scripts/install.sh serve

# The Python test tools (pytest, ruff, mypy, the fuzzers, ...).
install-test: $(TEST_STAMP)

$(TEST_STAMP): $(STAMP)
	BACKEND=$(BACKEND) VENV=$(VENV) bash scripts/install.sh test

# redis-server and Prometheus (promtool): only the whole suite starts them.
system-packages:
	bash scripts/install.sh system

# SPECGATE_* environment variables (SPECGATE_PORT, SPECGATE_CONFIG, ...) are honoured.
serve: install
	$(VENV)/bin/specgate serve $(ARGS)

prepare: install
	$(VENV)/bin/specgate prepare

# The whole suite: lint and types, the fast tier, and the real vLLM tier (which runs
# guidellm and client libraries unchanged against the gateway, hence their venvs).
test: install-test system-packages $(LOAD_VENV)/.installed $(CLIENTS_VENV)/.installed
	$(VENV)/bin/ruff check gateway service engines policies sim training tests bench
	$(VENV)/bin/mypy
	$(PY) -m pytest

# The developer's loop: policy, service, engine-contract and gateway tests that need
# only the Python packages (tests/tiers.py), on two workers; no Redis or Prometheus.
test-unit: install-test
	$(PY) -m pytest -m unit -n 2 --dist loadgroup -q \
		tests/policies tests/service tests/engines tests/gateway tests/test_layers.py \
		tests/test_doc_links.py

# Everything but the real vLLM tier.
test-fast: install-test system-packages
	$(PY) -m pytest -m "not real"

lint: install-test
	$(VENV)/bin/ruff check gateway service engines policies sim training tests bench
	$(VENV)/bin/mypy

# Benchmarks print figures (not tests); the routing report (simulator + real CPU
# sweep, bench/out/REPORT.md) runs last and prints the summary line.
bench: install-test
	$(PY) -m bench.gateway_overhead
	$(PY) -m bench.decision_latency
	$(PY) -m bench.acceptance --gateway
	$(PY) -m bench.report

# Reproduce the shipped drafters (docs/drafters.md): a base on the first 1,536 prompts,
# a fine-tune on 4,608, one on the 7,680 prompts after those (rows 4,609-12,288: kinds
# the first rounds never saw), then one on rows 12,289-16,384 and one on rows 16,385-21,981;
# then for EAGLE-3 a pass back over rows 12,289-16,384, the vocabulary grown to 16,384
# tokens on them, and passes back over rows 4,609-12,288, 1-4,608 and 1-6,642; for DFlash a pass
# back over rows 1-4,608 with the vocabulary grown to 16,384 tokens, and one more grown to
# three layers. Answers are shipped for all of them, so none is generated here; resumable,
# results in drafters/.
train-drafters: install-test
	$(VENV)/bin/specgate train-drafter --method eagle3 --limit 1536 --epochs 8 --out drafters/base
	$(VENV)/bin/specgate train-drafter --method dflash --limit 1536 --epochs 5 --lr 2e-3 --out drafters/base
	$(VENV)/bin/specgate train-drafter --method eagle3 --limit 4608 --epochs 2 --lr 5e-4 \
		--init-from drafters/base/eagle3 --out drafters/round2
	$(VENV)/bin/specgate train-drafter --method dflash --limit 4608 --epochs 2 --lr 1e-3 \
		--init-from drafters/base/dflash --out drafters/round2
	$(VENV)/bin/specgate train-drafter --method eagle3 --skip 4608 --limit 7680 --epochs 2 \
		--lr 6e-4 --init-from drafters/round2/eagle3 --out drafters/round3
	$(VENV)/bin/specgate train-drafter --method dflash --skip 4608 --limit 7680 --epochs 1 \
		--lr 1e-3 --init-from drafters/round2/dflash --out drafters/round3
	$(VENV)/bin/specgate train-drafter --method eagle3 --skip 12288 --limit 4096 --epochs 1 \
		--lr 5e-4 --init-from drafters/round3/eagle3 --out drafters/round4
	$(VENV)/bin/specgate train-drafter --method dflash --skip 12288 --limit 4096 --epochs 2 \
		--lr 1e-3 --init-from drafters/round3/dflash --out drafters/round4
	$(VENV)/bin/specgate train-drafter --method eagle3 --skip 16384 --limit 5597 --epochs 1 \
		--lr 5e-4 --init-from drafters/round4/eagle3 --out drafters/round5
	$(VENV)/bin/specgate train-drafter --method eagle3 --skip 12288 --limit 4096 --epochs 1 \
		--lr 5e-4 --init-from drafters/round5/eagle3 --out drafters/round6
	$(VENV)/bin/specgate train-drafter --method eagle3 --skip 12288 --limit 4096 --epochs 1 \
		--lr 5e-4 --draft-vocab 16384 --keep-vocab --init-from drafters/round6/eagle3 \
		--out drafters/round6b
	$(VENV)/bin/specgate train-drafter --method eagle3 --skip 4608 --limit 7680 --epochs 1 \
		--lr 5e-4 --draft-vocab 16384 --keep-vocab --init-from drafters/round6b/eagle3 \
		--out drafters/round7
	$(VENV)/bin/specgate train-drafter --method eagle3 --limit 4608 --epochs 1 --lr 5e-4 \
		--draft-vocab 16384 --keep-vocab --init-from drafters/round7/eagle3 --out drafters/round8
	$(VENV)/bin/specgate train-drafter --method eagle3 --limit 6642 --epochs 1 --lr 4e-4 \
		--draft-vocab 16384 --keep-vocab --init-from drafters/round8/eagle3 --out drafters
	$(VENV)/bin/specgate train-drafter --method dflash --skip 16384 --limit 5597 --epochs 2 \
		--lr 1e-3 --init-from drafters/round4/dflash --out drafters/round5
	$(VENV)/bin/specgate train-drafter --method dflash --limit 4608 --epochs 2 --lr 1e-3 \
		--draft-vocab 16384 --keep-vocab --init-from drafters/round5/dflash --out drafters/round6
	$(VENV)/bin/specgate train-drafter --method dflash --limit 4608 --epochs 2 --lr 1e-3 \
		--draft-vocab 16384 --keep-vocab --dflash-layers 3 --init-from drafters/round6/dflash \
		--out drafters/round7
	# DFlash rounds 8 to 10 want a GPU with 24 GB free for --features-on-device (rounds 8
	# and 9: 6.5 + 1.6 minutes on one H100, as --max-train-minutes 6.5 and 1.6: 3,183 and
	# 759 steps, which these epoch counts give on any device; round 10, over every prompt:
	# 2,947 steps in 5 minutes on one H200; on 2 CPU cores, drop --features-on-device and
	# allow about a day and a half).
	$(VENV)/bin/specgate train-drafter --method dflash --limit 21981 --epochs 9.7 --lr 1e-3 \
		--draft-vocab 16384 --keep-vocab --dflash-layers 3 --dflash-anchors 128 \
		--batch-tokens 16384 --features-on-device --init-from drafters/round7/dflash \
		--out drafters/round8
	$(VENV)/bin/specgate train-drafter --method dflash --limit 21981 --epochs 2.31 --lr 4e-4 \
		--draft-vocab 16384 --keep-vocab --dflash-layers 3 --dflash-anchors 128 \
		--batch-tokens 16384 --features-on-device --init-from drafters/round8/dflash \
		--out drafters/round9
	$(VENV)/bin/specgate train-drafter --method dflash --limit 28125 --epochs 7 --lr 4e-4 \
		--draft-vocab 16384 --keep-vocab --dflash-layers 3 --dflash-anchors 128 \
		--batch-tokens 16384 --features-on-device --init-from drafters/round9/dflash \
		--out drafters

# SpecGate against vLLM's own OpenAI server with each single method, same machine, same
# client, phased unlabelled workloads (mixed, light, ShareGPT conversations, keyword-free
# office work), side by side (bench/out/peer.json); ARGS="--order sequential --rounds 2"
# runs whole workloads back to back.
bench-peer: install-test
	$(PY) -m bench.peer $(ARGS)

# The soak run: 10 minutes of mixed traffic on real engines (bench/out/soak.md).
soak: install
	$(PY) -m bench.soak

# The soak with an engine's core process killed every minute (bench/out/chaos.md).
chaos: install
	$(PY) -m bench.soak --chaos-every 60 --out bench/out/chaos.md $(ARGS)

# guidellm and aiperf against a running gateway (`make serve` first), each with its
# default request shapes; LOAD_* variables in scripts/loadtest.sh. Their own venv:
# their pins (rich, pillow, prometheus-client, ...) must not move the gateway's.
loadtest: $(LOAD_VENV)/.installed
	LOAD_VENV=$(LOAD_VENV) bash scripts/loadtest.sh

# torch: guidellm needs it; 2.13.0 is the CPU build pip finds with the gateway's (see install.sh).
$(LOAD_VENV)/.installed:
	python3 -m venv $(LOAD_VENV)
	$(LOAD_VENV)/bin/python -m pip install --progress-bar off "torch==2.13.0" \
		guidellm==0.8.1 aiperf==0.13.0
	touch $@

# Client libraries the real tier drives unchanged (tests/real/clients/): their own venv,
# so that their pins (openai, pydantic, httpx, ...) never move the gateway's.
$(CLIENTS_VENV)/.installed:
	python3 -m venv $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/python -m pip install --progress-bar off openai-agents==0.24.0 \
		langchain-openai==1.7.4 litellm==1.110.2
	touch $@

clean:
	rm -rf $(VENV) $(LOAD_VENV) $(CLIENTS_VENV) .pytest_cache .mypy_cache .ruff_cache
