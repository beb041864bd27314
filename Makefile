# agentsearch: `make run` serves the embedded default, `make test` passes the suite; each sets itself up.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: run test chromium bench bench-full lint typecheck deploy-check clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first: the CPU wheel on this machine; a bare torch requirement later would pull a CUDA build.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[dev]'
	touch $(STAMP)

$(VENV): $(STAMP)

run: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m service serve --data-dir ./data

test: $(STAMP) chromium
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

# The admin dashboard's browser tests drive Debian's chromium (Playwright cannot download a browser here).
chromium:
	command -v chromium >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

# The code search scale bench compares against ripgrep on the same tree (`python -m bench.bench_code --scale`).
.PHONY: ripgrep
ripgrep:
	command -v rg >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y ripgrep)

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m bench

bench-full: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m bench --full

# A steady mixed search load on a real `agentsearch serve` over loopback (60 s; LOADTEST_ARGS="--duration 300" for longer).
# `make loadtest-capacity`: the highest rate each surface holds (p99 <= 150 ms, no error, 60 s holds, uncached texts),
# beside the engine-only rate; LOADTEST_ARGS="--hold 15" for a quick run, "--service-tree ../prev" to compare a checkout.
.PHONY: loadtest loadtest-capacity
loadtest: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m bench.loadtest $(LOADTEST_ARGS)

loadtest-capacity: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m bench.loadtest --capacity $(LOADTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check service workers tests bench deploy
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

deploy-check: $(STAMP)
	$(PY) -m deploy.check

clean:
	rm -rf $(VENV) data
