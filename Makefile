# fusesched — `make run` and `make test` set everything up on a fresh machine.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck unit bench clean system front

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The embedded default: a controller (SQLite) and two local agents run a small mixed workload.
run: $(STAMP) system front
	rm -rf .run && $(BIN)/fusesched up --demo --agents 2 --data-dir .run --port 0

lint: $(STAMP)
	$(BIN)/ruff check src tests $(wildcard bench)
	$(BIN)/ruff format --check src tests $(wildcard bench)

typecheck: $(STAMP)
	$(BIN)/mypy src

# Debian packages and services the tests use (bubblewrap, OpenMPI, Slurm, PostgreSQL, ...).
system: $(STAMP)
	bash scripts/system_deps.sh $(BIN)/python

# The native front of the `fusesched` command (src/fusesched/cli/front.c; docs/SUBMIT.md): one
# process per `fusesched submit`/`sbatch` in about 2 ms, everything else handed to the Python
# command. Without a C compiler the Python console script stays.
front: $(STAMP) system
	@if command -v cc >/dev/null; then \
	    cc -O2 -std=c11 -Wall -Wextra -Werror -o $(BIN)/fusesched.front src/fusesched/cli/front.c \
	        -DFUSESCHED_PYTHON='"$(abspath $(BIN))/python"' \
	    && mv -f $(BIN)/fusesched.front $(BIN)/fusesched; \
	else echo "front: no C compiler; $(BIN)/fusesched stays the Python script"; fi

# The tests without live clusters run on every core (pytest-xdist); the live ones, which start
# controllers, agents and tasks, on two workers a file each (most of their time is waiting),
# then those marked `serial`, whose timing a concurrent test could upset, one at a time.
# Every run goes to its end (a failure in one does not hide the others' results).
unit: $(STAMP) system front
	$(BIN)/python -m pytest -n auto --ignore=tests/live; first=$$?; \
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not serial" --durations=25 tests/live; \
	second=$$?; \
	$(BIN)/python -m pytest -m serial tests/live; third=$$?; \
	test $$first -eq 0 && test $$second -eq 0 && test $$third -eq 0

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/replay_speed.py
	$(BIN)/python bench/cycle_speed.py
	$(BIN)/python bench/gpu_placement_speed.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
