# Two entry points for a fresh machine: `make demo` and `make test`.
# Both bootstrap .venv from the committed lock (requirements.lock) with uv.
PY ?= python3
VENV := .venv
UV_VERSION := 0.13.9
STAMP := $(VENV)/.installed

.PHONY: demo test lint lock bench proto clean

$(STAMP): requirements.lock pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(VENV)/bin/uv pip sync -q --python $(VENV)/bin/python requirements.lock
	$(VENV)/bin/uv pip install -q --python $(VENV)/bin/python --no-deps -e .
	touch $@

demo: $(STAMP)
	$(VENV)/bin/python -m localcluster.demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Re-resolve the lock after changing dependencies in pyproject.toml.
lock: $(STAMP)
	$(VENV)/bin/uv pip compile -q pyproject.toml --extra dev -p 3.11 -o requirements.lock

# Regenerate the gRPC stubs of movers/cbt/_pb/schema.proto (tests fail when they are stale).
proto: $(STAMP)
	$(VENV)/bin/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. movers/cbt/_pb/schema.proto
	$(VENV)/bin/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. movers/cbt/_pb/flat.proto

bench: $(STAMP)
	$(VENV)/bin/python bench/engine_bench.py --write-docs

clean:
	rm -rf $(VENV) .pytest_cache
