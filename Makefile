# Two entry points for a fresh machine: `make demo` and `make test`.
# Both bootstrap .venv from the committed lock (requirements.lock) with uv.
PY ?= python3
VENV := .venv
UV_VERSION := 0.13.9
STAMP := $(VENV)/.installed

.PHONY: demo test deps-demo deps-test lint lock bench bench-scaling proto clean ui pools screenshots

# The Debian packages each entry point needs (their one list is .ci/deps): installed when make runs as root
# with apt-get, else make stops at once with one line naming them.
deps-demo:
	@PY=$(PY) .ci/deps demo

deps-test:
	@PY=$(PY) .ci/deps test

# The dependencies compiled to bytecode, as in the image (where PYTHONDONTWRITEBYTECODE keeps none from run time):
# the benches measure a command's start-up as a mover pod pays it.
$(STAMP): requirements.lock pyproject.toml | deps-demo
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(VENV)/bin/uv pip sync -q --compile-bytecode --python $(VENV)/bin/python requirements.lock
	$(VENV)/bin/uv pip install -q --python $(VENV)/bin/python --no-deps -e .
	touch $@

demo: deps-demo $(STAMP)
	$(VENV)/bin/python -m demo.demo

# The suite on TEST_WORKERS pytest-xdist workers (a test file per worker at a time; a third worker on 2 cores was
# slower: 838 s against 741 s of pytest at a4f6beb), the 25 slowest tests listed, then the
# replay of what the product's identities did in every test's cluster against the shipped roles
# (tests/cluster/test_shipped_rbac.py), which needs all of them to have run: both share a temporary --audit-dir,
# removed at the end.
TEST_WORKERS ?= 2

test: deps-test $(STAMP)
	audit=$$(mktemp -d) && trap 'rm -rf "$$audit"' EXIT && \
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25 --audit-dir="$$audit" \
		--deselect tests/cluster/test_shipped_rbac.py && \
	$(VENV)/bin/python -m pytest -q -p no:xdist --audit-dir="$$audit" tests/cluster/test_shipped_rbac.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Re-resolve the lock after changing dependencies in pyproject.toml.
lock: $(STAMP)
	$(VENV)/bin/uv pip compile -q pyproject.toml --extra dev -p 3.11 -o requirements.lock

# Regenerate the gRPC stubs of movers/cbt/_pb/schema.proto (tests fail when they are stale).
proto: $(STAMP)
	$(VENV)/bin/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. movers/cbt/_pb/schema.proto
	$(VENV)/bin/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. movers/cbt/_pb/flat.proto

bench: $(STAMP)
	$(VENV)/bin/python bench/engine_bench.py --write-docs

# Repository format version 1 vs 2 at scale (issue 12): history, repository size, many extents, maintenance; and
# the content hash of version 2 (SHA-256 vs BLAKE3). Each script writes its section of docs/scaling-benchmarks.md;
# together they take several minutes.
bench-scaling: $(STAMP)
	$(VENV)/bin/python bench/history_bench.py --write-docs
	$(VENV)/bin/python bench/scale_bench.py --chunks 500000,5000000 --write-docs
	$(VENV)/bin/python bench/extents_bench.py --write-docs
	$(VENV)/bin/python bench/hash_bench.py --write-docs
	$(VENV)/bin/python bench/maintenance_bench.py --chunks 500000,2000000 --full-verify --write-docs

clean:
	rm -rf $(VENV) .pytest_cache

# A local Prefect server with its UI, to watch runs, progress and artifacts in a browser. Its state
# (database, profiles) is in .prefect/ (git-ignored), not in ~/.prefect; analytics are off; it
# listens on loopback only. Runs use it only when told to: PREFECT_API_URL=... per command.
PREFECT_UI_PORT ?= 4200
PREFECT_UI_API := http://127.0.0.1:$(PREFECT_UI_PORT)/api

ui: $(STAMP)
	@mkdir -p .prefect
	@echo "Prefect UI: http://127.0.0.1:$(PREFECT_UI_PORT)  (state in .prefect/; Ctrl-C stops it)"
	@echo "Send a run to it:  PREFECT_API_URL=$(PREFECT_UI_API) make demo"
	@echo "Deploy to it:      export PREFECT_API_URL=$(PREFECT_UI_API); make pools; $(VENV)/bin/prefect --no-prompt deploy --all"
	@echo "(set PREFECT_API_URL per command rather than with 'prefect config set': tests and other runs stay off it)"
	$(VENV)/bin/python -m deploy.prefect_server --home .prefect --port $(PREFECT_UI_PORT)

# Create or update the work pools of prefect.yaml (cbt-mover-local, cbt-mover-k8s) on the server
# of PREFECT_API_URL, by default the one `make ui` runs. POOLS_ARGS: e.g. --image REGISTRY/cbt-mover:TAG.
pools: $(STAMP)
	PREFECT_API_URL=$${PREFECT_API_URL:-$(PREFECT_UI_API)} $(VENV)/bin/python -m deploy.pools $(POOLS_ARGS)

# PNG screenshots of the UI's main pages (docs/ui/, shown in docs/ui.md): the demo sent to a fresh temporary
# Prefect server, its pages rendered by headless Chromium (Debian's `chromium`). Takes a few minutes.
screenshots: $(STAMP)
	$(VENV)/bin/python -m demo.screenshots --out docs/ui
