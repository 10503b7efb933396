# Enverif. Two commands matter: `make run` (set up, then `enverif dev`) and `make test`
# (set up, then every check CI runs). Needs only python3 (3.11+), gcc and git.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Installed once per change of pyproject.toml; delete it (or `make clean`) to force a reinstall.
STAMP := $(VENV)/.installed
PYTEST := $(BIN)/pytest -q -p no:cacheprovider
PYTEST_ARGS ?=

.PHONY: help setup run test schema schema-check lint-schema lint fmt typecheck unit integration \
	integration-sqlite integration-mysql docs bench bench-peers chaos clean

help:
	@echo "make run      set up everything and start 'enverif dev' (API + worker + demo workspace)"
	@echo "make test     set up everything and run the whole test suite (what CI runs)"
	@echo "make unit     the fast loop: the unit tests only (no database, Redis or worker; under a minute)"
	@echo "make docs     build the manual in docs/ with mkdocs --strict (into site/; a broken link fails)"
	@echo "make setup    create .venv and install Enverif with its dev tools"
	@echo "make schema   regenerate schema.graphql from the code"
	@echo "make lint-schema  @graphql-eslint (schema-recommended + relay rules) on schema.graphql"
	@echo "make lint     ruff check + ruff format --check;  make fmt: ruff format + ruff check --fix"
	@echo "make bench    run the benchmarks (bench/);  make chaos: the fault-injection tests"
	@echo "make bench-peers  the durable 3-call run on Enverif, DBOS, LangGraph and a raw floor: one table"

setup: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# compat mode: a plain path entry, which mypy and every tool follow.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --disable-pip-version-check -q -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

run: setup
	$(BIN)/enverif dev

test: setup schema-check lint-schema
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(MAKE) --no-print-directory docs unit integration

unit: setup
	@echo "==== unit tests ===="
	$(PYTEST) tests/unit $(PYTEST_ARGS)

# The integration suite runs twice: once on SQLite (the embedded default) and once on
# MariaDB/MySQL (production; the only leg where row locks are real). The two legs run side
# by side (each has its own database and Redis key prefix; most of their time is spent
# waiting on workers); -O prints each leg's output whole when it ends.
integration: setup
	$(MAKE) --no-print-directory -j2 -O integration-sqlite integration-mysql

integration-sqlite: setup
	@echo "==== integration tests: database leg SQLite (ENVERIF_TEST_DB=sqlite) ===="
	ENVERIF_TEST_DB=sqlite $(call run_pytest,tests/integration)

integration-mysql: setup
	@echo "==== integration tests: database leg MariaDB/MySQL (ENVERIF_TEST_DB=mysql) ===="
	ENVERIF_TEST_DB=mysql $(call run_pytest,tests/integration)

# pytest exits 5 when it collected nothing: a leg that ran no test is a failure, said aloud.
define run_pytest
$(PYTEST) $(1) --durations=25 $(PYTEST_ARGS) || { rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "ERROR: no tests were collected in $(1)" >&2; fi; exit $$rc; }
endef

# The manual (docs/, mkdocs.yml) as a static site in site/. --strict turns every warning (a
# broken link, a page missing from the nav, an included example that is not there) into a
# failure. Offline: no plugin fetches anything and the theme loads no web fonts.
docs: setup
	@echo "==== docs: mkdocs build --strict ===="
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

schema: setup
	$(BIN)/python -c "from app.graphql.schema import schema; print(schema.as_str())" > schema.graphql.tmp
	mv schema.graphql.tmp schema.graphql

# Compared up to a final newline, so a file written by `strawberry export-schema` matches too.
schema-check: setup
	@echo "==== schema.graphql matches the code ===="
	@diff -u <(sed -e '$$a\' schema.graphql) \
		<($(BIN)/python -c "from app.graphql.schema import schema; print(schema.as_str())") \
		|| { echo "schema.graphql is out of date with the code: run 'make schema' and commit it" >&2; exit 1; }

# tests/js's npm packages (pinned in its package-lock.json), installed again when the lock changes.
JS_STAMP := tests/js/node_modules/.installed
$(JS_STAMP): tests/js/package-lock.json
	npm ci --prefix tests/js --no-audit --no-fund --loglevel=error
	touch $(JS_STAMP)

# @graphql-eslint's schema-recommended and relay rules on schema.graphql; the rules adjusted
# and why are in tests/js/eslint.config.mjs.
lint-schema: $(JS_STAMP)
	@echo "==== schema.graphql: @graphql-eslint ===="
	tests/js/node_modules/.bin/eslint --config tests/js/eslint.config.mjs --max-warnings 0 schema.graphql

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: setup
	$(BIN)/mypy

bench: setup
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/throughput.py --db sqlite
	$(BIN)/python bench/delegation.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/credentials.py
	$(BIN)/python bench/events.py
	$(BIN)/python bench/api.py
	$(BIN)/python bench/providers.py
	$(BIN)/python bench/fragments.py

# Each peer in its own venv from its pinned requirements.txt, made on first use and again when
# the file changes (docs/performance.md). BENCH_PEERS_ARGS: e.g. --only floor,dbos --runs 200.
PEERS := floor dbos langgraph
PEER_STAMPS := $(foreach peer,$(PEERS),bench/peers/$(peer)/.venv/.installed)
BENCH_PEERS_ARGS ?=

bench/peers/%/.venv/.installed: bench/peers/%/requirements.txt
	rm -rf bench/peers/$*/.venv
	$(PYTHON) -m venv bench/peers/$*/.venv
	bench/peers/$*/.venv/bin/pip install --disable-pip-version-check -q -r $<
	touch $@

bench-peers: setup $(PEER_STAMPS)
	$(BIN)/python bench/peers/compare.py $(BENCH_PEERS_ARGS)

chaos: setup
	@if [ -d tests/chaos ]; then ENVERIF_TEST_DB=$${ENVERIF_TEST_DB:-mysql} $(PYTEST) -m chaos tests/chaos $(PYTEST_ARGS); \
	else echo "no chaos tests (tests/chaos does not exist)"; fi

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info site
