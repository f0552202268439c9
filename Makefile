# The two quick-start commands: `make train` and `make test`; `make lint` runs the linter,
# the format check and the type checker, as CI does, and `make test-landing` the tier CI runs after
# the default suite.
# Each creates .venv (if needed) and installs msrl from this repository's own
# files, with torch pinned through constraints.txt.
PYTHON ?= python3
VENV   ?= .venv
PIP    := $(VENV)/bin/python -m pip
CONFIG ?= configs/ppo_cartpole.yaml
# Optional extras for `make train`, comma-separated: `make train CONFIG=configs/ppo_atari.yaml EXTRAS=atari`
EXTRAS ?=
comma  := ,
BASE   := $(VENV)/.stamp-base$(if $(EXTRAS),-$(subst $(comma),-,$(EXTRAS)))

.PHONY: train test test-landing lint bench install install-dev install-bench clean

# Python writes the bytecode of what a run imports, on first import (see the install rules below).
RUN    := env -u PYTHONDONTWRITEBYTECODE

# It ends by saying how to reach the `msrl` command: it is installed in $(VENV), which is not on PATH.
train: $(BASE)
	$(RUN) $(VENV)/bin/msrl train $(CONFIG)
	@echo "msrl is installed in $(VENV), which is not on your PATH: run 'source $(VENV)/bin/activate'"
	@echo "to get the msrl command in this shell (or call $(VENV)/bin/msrl)."

test: $(VENV)/.stamp-dev
	$(RUN) $(VENV)/bin/python -m pytest -q

# CI's landing tier (tests marked `landing`, left out of `make test`): the learning gate (PPO, A2C
# and DQN on CartPole against msrl/app/gate/bands.json), a rollout worker killed twice and recovered
# from, compiled steps built by one run and loaded by the next, a run whose compiler is missing, a
# region built in the background and switched to, a build whose log holds no warning, and the longest
# end-to-end runs (MAPPO learning simple_spread, a distributed run resumed exactly, a run across two
# testbed hosts, a recurrent MAPPO policy trained beside a feed-forward one: 23-33 s each, which kept
# the default suite under its 6 minutes), and the Ray runs of new dataflow shapes (A3C's gradients
# under a synchronous and the asynchronous preset, prioritized replay in the rollouts and in a
# sharded fragment of its own: 15-25 s each).  Measured on the 2-core VM with
# other work beside it: 307 s at a load average of 5-10 (one pytest worker ran the compiled steps,
# 191 s cold, then the killed worker, 100 s with its undisturbed twin; the other the gate, 169 s),
# 562 s at a load average of 12-25.
test-landing: $(VENV)/.stamp-dev
	$(RUN) $(VENV)/bin/python -m pytest -q -m landing

# All three run (each reports), and the target fails if any of them failed.  mypy reads its
# files (the packages) and settings from pyproject.toml.
lint: $(VENV)/.stamp-dev
	@status=0; \
	$(VENV)/bin/ruff check . || status=1; \
	$(VENV)/bin/ruff format --check . || status=1; \
	$(VENV)/bin/mypy || status=1; \
	exit $$status

bench: $(VENV)/.stamp-bench
	$(VENV)/bin/python -m benchmarks.training_speed

install: $(BASE)
install-dev: $(VENV)/.stamp-dev
install-bench: $(VENV)/.stamp-bench

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# pip installs without byte-compiling (--no-compile): compiling all 13,000 modules of torch, Ray
# and the rest up front was 50-70 s of a fresh 144 s install, while a run imports about a sixth of
# them.  `train` and `test` instead let Python write the bytecode of what they import, on first
# import (about 8 s once), by running with PYTHONDONTWRITEBYTECODE unset (RUN above): where it is
# set, as on some CI machines, nothing would ever write the bytecode, and every Ray worker would
# compile torch from source as it starts (the suite then took 624 s instead of 400 s).
$(BASE): pyproject.toml constraints.txt | $(VENV)/bin/python
	$(PIP) install -q --no-compile -c constraints.txt -e '.$(if $(EXTRAS),[$(EXTRAS)])'
	touch $@

$(VENV)/.stamp-dev: pyproject.toml constraints.txt | $(VENV)/bin/python
	$(PIP) install -q --no-compile -c constraints.txt -e '.[dev]'
	touch $@ $(VENV)/.stamp-base

$(VENV)/.stamp-bench: pyproject.toml constraints.txt | $(VENV)/bin/python
	$(PIP) install -q --no-compile -c constraints.txt -e '.[dev,bench]'
	touch $@ $(VENV)/.stamp-base $(VENV)/.stamp-dev

clean:
	rm -rf $(VENV) build *.egg-info
