# graywire: `make run` starts the demo (PORT=9000 to pick its port), `make test` runs the whole suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test lint format bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# .[dev]: the test tools and every extra (the suite drives SNMP, Kubernetes and the ml detector)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/graywire demo $(if $(PORT),--port $(PORT))

# Everything on every core (at most four; each worker has a PostgreSQL database of its own),
# then the tests that hold real processes to wall-clock deadlines, one at a time: a busy
# second core would only test the machine's load.
test: $(STAMP)
	$(BIN)/ruff check .
	@# The second phase runs whatever the first gave; the target fails if either did.
	@first=0; second=0; \
	$(BIN)/pytest -m "not alone" -n auto --maxprocesses 4 --dist loadfile || first=$$?; \
	$(BIN)/pytest -m alone || second=$$?; \
	if [ $$first -ne 0 ] || [ $$second -ne 0 ]; then \
	  echo "make test: tests failed (parallel phase: exit $$first, alone phase: exit $$second)" >&2; \
	  exit 1; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .

bench: $(STAMP)
	$(BIN)/python bench/bench_rates.py
	$(BIN)/python bench/bench_pipeline.py
	$(BIN)/python bench/bench_metrics.py --hosts 4096
	$(BIN)/python bench/bench_metrics.py --hosts 16384
	$(BIN)/python bench/bench_nccl_parse.py
	$(BIN)/python bench/bench_ufm_parse.py
	$(BIN)/python bench/bench_snmp.py
	$(BIN)/python bench/bench_api_load.py --hosts 16384 --routes /api/v1/drain,/api/v1/ports
	$(BIN)/python bench/bench_cluster.py

clean:
	rm -rf $(VENV) graywire-data .pytest_cache .ruff_cache
