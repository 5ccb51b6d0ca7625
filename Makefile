# One entry point. `make test` is exactly what CI runs (.ci/run calls it).
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3
PYTEST_ARGS ?=

.PHONY: all venv binaries lint typecheck crds test unit integration playground cluster-up cluster-down clean

all: test

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: $(BIN)/.installed

# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok
# once into ~/.cache/rollouts (tens of minutes the first time, nothing afterwards).
binaries: venv
	$(BIN)/rollouts cluster build

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy --strict lifecycle hooks rollouts
	$(BIN)/lint-imports

crds: venv
	$(BIN)/rollouts crds --out crds

unit: venv
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: binaries
	$(BIN)/pytest tests/integration tests/examples $(PYTEST_ARGS)

# Everything: lint, types, layer contracts, the CRD drift check (a unit test) and all tiers.
test: binaries lint typecheck
	$(BIN)/pytest tests $(PYTEST_ARGS)

playground: binaries
	$(BIN)/rollouts playground

cluster-up: binaries
	$(BIN)/rollouts cluster up

# The benchmark suite (not part of `make test`): N = 100 and 1000 against the native
# Deployment, table printed, JSON in bench/results/. BENCH_ARGS="--large" adds N = 5000.
.PHONY: bench
BENCH_ARGS ?=
bench: binaries
	$(BIN)/python -m bench.suite $(BENCH_ARGS)

cluster-down: venv
	$(BIN)/rollouts cluster down

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
