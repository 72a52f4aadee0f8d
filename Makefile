# agui-relay developer loop. `make help` lists the targets; CI and the README
# call these same targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NPM_DIRS := $(patsubst %/package-lock.json,%,$(wildcard tests/*/package-lock.json)) \
  services/consumer/inbox
NPM_STAMPS := $(addsuffix /node_modules/.installed,$(NPM_DIRS))
PYTEST_ARGS ?=
# `make test` runs the suite on this many pytest-xdist workers, each with a broker of
# its own (the tests wait on Kafka and on their child services more than they compute:
# on two cores two workers take ~40 % off the time; three took another third off, but the
# fault scenarios' time limits, met on two, were missed under three's load); 0 runs it in
# this one process.
PYTEST_WORKERS ?= 2
INBOX := services/consumer/inbox
INBOX_BUILD := $(INBOX)/dist/.built

.PHONY: help install jars chromium run test test-faults test-hostile test-cluster lint bench contracts kafka-up kafka-cluster-up kafka-down clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,lint,bench]'
	@touch $@

%/node_modules/.installed: %/package-lock.json %/package.json
	npm ci --prefix $* --no-audit --no-fund --loglevel=error
	@touch $@

jars: $(STAMP) ## Fetch the Kafka broker jars from Maven Central (skips when present)
	$(PY) -m deploy.kafka.launcher fetch

$(INBOX_BUILD): $(INBOX)/node_modules/.installed $(INBOX)/build.mjs $(INBOX)/tsconfig.json $(wildcard $(INBOX)/src/*)
	npm run --prefix $(INBOX) --silent build
	@touch $@

chromium: ## Headless Chromium for the browser tests (Debian's package; installed as root when missing)
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }

install: $(STAMP) jars $(NPM_STAMPS) $(INBOX_BUILD) chromium ## Set up everything: virtualenv, Python deps, Kafka jars, npm packages, the inbox page, Chromium

run: install ## Set up and run the whole system in the foreground (broker, topics, services) on 127.0.0.1:8000
	$(VENV)/bin/agui-relay up

test: install lint ## Set up and run the whole test suite against a real Kafka broker
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

test-faults: install ## Run only the fault suite (kills, restarts, fuzz)
	$(PY) -m pytest -m faults $(PYTEST_ARGS)

test-hostile: install ## Run only the hostile-input suite (the whole stack under agui-relay up)
	$(PY) -m pytest tests/hostile -m hostile $(PYTEST_ARGS)

test-cluster: install ## The cluster suite, every scenario: three local KRaft nodes (RF 3, min ISR 2), kills and restarts
	AGUI_CLUSTER_FULL=1 $(PY) -m pytest tests/cluster -m cluster $(PYTEST_ARGS)

lint: $(STAMP) ## ruff and mypy --strict (with the pydantic plugin)
	$(VENV)/bin/ruff check contracts services deploy tests $(wildcard bench)
	$(VENV)/bin/mypy

bench: install ## Run the benchmarks; prints tables, writes bench/results/*.json
	$(PY) -m bench

contracts: $(STAMP) ## Regenerate the JSON Schemas and the AsyncAPI document in contracts/schema
	$(PY) -m contracts.generate

kafka-up: jars ## Start the local broker on 127.0.0.1:9092 (background)
	$(VENV)/bin/agui-relay kafka up

kafka-cluster-up: jars ## Start a local 3-node cluster on 127.0.0.1:9092/9094/9096 (background)
	$(VENV)/bin/agui-relay kafka up --brokers 3

kafka-down: $(STAMP) ## Stop the local broker (or cluster)
	$(VENV)/bin/agui-relay kafka down

clean: ## Stop the local broker and remove everything fetched or generated
	-@test -x $(PY) && $(PY) -m deploy.kafka.launcher down
	rm -rf $(VENV) .run deploy/kafka/.cache bench/results tests/*/node_modules \
	  $(INBOX)/node_modules $(INBOX)/dist \
	  .mypy_cache .ruff_cache .pytest_cache .hypothesis
