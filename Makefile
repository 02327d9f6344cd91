# The two commands a reader needs are `make book` and `make test`; everything else supports them.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHROMIUM ?= /usr/bin/chromium

.PHONY: venv test test-fast book book-check assets bench bench-peers bench-simulated chromium clean distclean lab validation srt \
	scheduler-traces vllm-switches golden-plans

venv: $(STAMP)

# uv installs the pinned set in about 22 s from a cold cache where pip takes about 52 s (measured here); pip does
# it when uv cannot be had. Either way the versions are requirements.txt's. Bytecode is compiled at install (as
# pip does): with PYTHONDONTWRITEBYTECODE set, as on CI machines, every kernel would otherwise compile it again.
UV := uv==0.13.9
define pinned_install
$(1)/python -m pip install --quiet $(UV) && $(1)/uv pip install --python $(1)/python --quiet --compile-bytecode $(2) \
  || { $(1)/python -m pip install --quiet --upgrade pip && $(1)/python -m pip install --quiet $(2); }
endef

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(call pinned_install,$(BIN),-r requirements.txt)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# Debian's chromium drives the browser checks; Playwright never downloads its own.
chromium:
	@test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# srt-slurm itself (srtctl 0.3.0, a wheel outside the repo: not on PyPI), in a venv of its own (.srt/, git-ignored;
# its dependencies from PyPI), so that the tests run its dry run and its worker-command builder on every recipe
# pdtune writes (tests/srt_check.py). pdtune never imports it. SRTCTL_WHEEL names the wheel; by default the
# shared tools folder beside the checkout (../shared from the main checkout, ../../shared from a worktree).
SRT := .srt
SRTCTL_WHEEL ?= $(firstword $(wildcard $(CURDIR)/../shared/tools/srtctl/srtctl-0.3.0-py3-none-any.whl \
                  $(CURDIR)/../../shared/tools/srtctl/srtctl-0.3.0-py3-none-any.whl))
srt: $(SRT)/.installed

$(SRT)/.installed: $(SRTCTL_WHEEL)
	@test -n "$(SRTCTL_WHEEL)" || { echo "srt: no srtctl-0.3.0 wheel found; set SRTCTL_WHEEL=path/to/srtctl-0.3.0-py3-none-any.whl"; exit 1; }
	test -x $(SRT)/bin/python || $(PYTHON) -m venv $(SRT)
	$(call pinned_install,$(SRT)/bin,"$(SRTCTL_WHEEL)")
	touch $@

# The book tests build the book themselves (into a temporary folder); the vendored assets come first.
# Long groups first (tests/conftest.py orders them), one worker each; short modules fill in around them.
# pdtune's modules are compiled to bytecode first: with PYTHONDONTWRITEBYTECODE set, each of the ~160 kernels and
# ~60 child processes the tests start would compile them again.
# Three workers on two cores: much of a worker's time is spent waiting (on a kernel starting, a signal test's
# child, Chromium, JupyterLab), and a third worker fills it (README, "Tests and benchmarks", has the times).
TEST_WORKERS ?= 3
test: venv chromium assets srt
	$(BIN)/python -m compileall -q src tests >/dev/null
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

test-fast: venv
	$(BIN)/python -m pytest -m "not slow" -n 2 --dist loadgroup

# --- the book -----------------------------------------------------------------------------------------
# Third-party JavaScript (vega bundle from vl-convert-python, MathJax 3 from sphinx-mathjax-offline) is
# written into book/assets/vendor/ (git-ignored); a no-op when its manifest matches the installed packages.
assets: venv
	$(BIN)/python -m pdtune.site.vendor book/assets/vendor

# Kernels started by the build must know it is the static book (explorers print a note instead of a widget)
# and must come from this venv.
BOOK_ENV := PDTUNE_STATIC_BUILD=1 JUPYTER_PREFER_ENV_PATH=1 PATH="$(abspath $(BIN)):$$PATH"
BOOK_CONFIG := _build/_config.executed.yml

# Clean build, warnings fail it (-W -n). Every chapter executes: first all of them in parallel into a
# wiped jupyter-cache (Jupyter Book alone runs them one by one), then Sphinx builds from that cache through
# a generated copy of _config.yml. A bare `jupyter-book build .` also works: it executes serially (force).
book: venv assets
	$(BIN)/python -m pdtune.site.bookbuild check-toc
	rm -rf _build/html _build/.doctrees _build/jupyter_execute _build/.jupyter_cache $(BOOK_CONFIG)
	$(BIN)/python -m compileall -q src >/dev/null  # every chapter's kernel imports pdtune (see test:)
	$(BOOK_ENV) $(BIN)/python -m pdtune.site.bookexec --cache _build/.jupyter_cache --config-out $(BOOK_CONFIG)
	$(BOOK_ENV) $(BIN)/jupyter-book build . --config $(BOOK_CONFIG) -W -n --keep-going --all
	@echo "book: _build/html/index.html"

# The book tests only: build checks and every page in headless Chromium (screenshots in _build/screenshots).
book-check: venv chromium assets
	$(BIN)/python -m pytest -n 2 --dist loadgroup tests/test_book_build.py tests/test_browser.py

# JupyterLab on the chapters, from this venv: every notebooks/*.md opens as a notebook (jupytext) and the
# ipywidgets explorers run. Offline: the extensions are prebuilt in the pinned wheels, news and update checks
# are off (pdtune.site.lab). LAB_PORT picks the port; open the URL with the token it prints.
LAB_PORT ?= 8888
lab: venv assets
	$(BIN)/python -m pdtune.site.lab --port $(LAB_PORT)

bench: venv
	@status=0; for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || status=1; done; exit $$status

# The scorecard by the scheduler simulation (issue 23): aiconfigurator's silicon rows leave-one-model-out with every
# row's benchmark run in pdtune.sim (much longer than `make bench`: the simulation of thousands of requests per row),
# timed (with the leave-one-model-out factors of the steady-state fit, then with those fitted through the simulation:
# `python -m pdtune.scorecard --fit-simulated` refits them, about 40 minutes on two cores),
# and the held-out InferenceX runs with both latency models, each written as CSV to data/perfmodel/validation/;
# then `pdtune plan --latency-model simulated` on bench_plan.py's case, timed.
bench-simulated: venv
	@status=0; \
	nice $(BIN)/python benchmarks/bench_validate.py --latency-model simulated \
	  --csv data/perfmodel/validation/heldout_simulated.csv || status=1; \
	nice $(BIN)/python benchmarks/bench_validate.py --latency-model simulated \
	  --lomo-factors data/perfmodel/validation/lomo_models_simulated.csv \
	  --csv data/perfmodel/validation/lomo_simulated.csv || status=1; \
	nice $(BIN)/python benchmarks/bench_heldout.py --calibrated --csv data/perfmodel/validation/inferencex_heldout.csv || status=1; \
	$(BIN)/python benchmarks/bench_plan.py --latency-model simulated || status=1; \
	exit $$status

# vLLM's own scheduler on this CPU, step by step, for pdtune.sim to replay (tests/test_sim_traces.py): vLLM 0.33.0
# from PyPI in its own venv (VLLM_REF, git-ignored, ~9 GB; never the project's venv); the traces are data
# (data/vllm/scheduler-traces/), rewritten here and replayed at once. `make scheduler-traces VLLM_REF=/path` reuses
# an existing venv.
VLLM_REF ?= .vllm-ref
scheduler-traces: venv
	test -x $(VLLM_REF)/bin/vllm || { test -x $(VLLM_REF)/bin/python || $(PYTHON) -m venv $(VLLM_REF); \
	  $(VLLM_REF)/bin/python -m pip install --quiet vllm==0.33.0; }
	nice $(VLLM_REF)/bin/python scripts/scheduler_traces.py --out data/vllm/scheduler-traces
	$(BIN)/python -m pdtune.sim.replay data/vllm/scheduler-traces

# The peer comparison: aiconfigurator 0.12 from PyPI in its own venv (.peers/, git-ignored; never imported by pdtune
# or its tests), both tools on the same held-out vLLM rows, and aiconfigurator's default-search time. Every script
# runs and prints its numbers; the target fails at the end if one of them missed its target.
PEERS := .peers
bench-peers: venv
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet aiconfigurator==0.12.0
	@status=0; \
	$(BIN)/python benchmarks/bench_validate.py --json _build/bench/heldout.json || status=1; \
	$(BIN)/python benchmarks/bench_accuracy.py --heldout _build/bench/heldout.json || status=1; \
	$(BIN)/python benchmarks/peer_timing.py || status=1; \
	exit $$status

# The performance model's scorecard on aiconfigurator's real vLLM runs (chapter 8 reads it): minutes of refitting,
# so it is written to data/perfmodel/validation/ once, not at book-build time. Rerun after changing pdtune.perfmodel:
# it recomputes every row, says what moved against the shipped file, and writes it (make test recomputes one fold).
validation: venv
	$(BIN)/python -m pdtune.scorecard

# vLLM's switches per line (data/vllm/switches.csv), read from the published wheels 0.11 and 0.20-0.33 (the .0
# release of each line; about 400 MB each, downloaded one at a time and deleted once its files are unpacked into
# VLLM_SRC), and where the chunked-local hybrid-manager default flipped (the wheels between the lines too).
VLLM_SRC ?= _build/vllm-src
VLLM_LINES := 0.11.0 $(foreach m,20 21 22 23 24 25 26 27 28 29 30 31 32 33,0.$(m).0)
VLLM_BETWEEN := 0.12.0 0.13.0 0.14.0 0.14.1 0.15.1 0.16.0 0.17.1 0.18.1 0.19.1
vllm-switches: venv
	$(BIN)/python scripts/vllm_switches.py fetch $(VLLM_LINES) --dest $(VLLM_SRC)/lines
	$(BIN)/python scripts/vllm_switches.py fetch $(VLLM_BETWEEN) --dest $(VLLM_SRC)/between
	$(BIN)/python scripts/vllm_switches.py table --src $(VLLM_SRC)/lines --out data/vllm/switches.csv
	$(BIN)/python scripts/vllm_switches.py flip VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE \
	  --src $(VLLM_SRC)/lines --src $(VLLM_SRC)/between --out data/vllm/chunked-local-default.csv
	PDTUNE_VLLM_SRC=$(VLLM_SRC)/lines $(BIN)/python -m pytest -q tests/test_vllm_switches.py

# Golden plans from vLLM 0.33.0's own KV planner, run on CPU in the same venv of its own (VLLM_REF above):
# data/vllm/golden-plans.json, compared with `pdtune state` by tests/test_golden_plans.py in make test.
golden-plans: venv
	test -x $(VLLM_REF)/bin/vllm || { test -x $(VLLM_REF)/bin/python || $(PYTHON) -m venv $(VLLM_REF); \
	  $(VLLM_REF)/bin/python -m pip install --quiet vllm==0.33.0; }
	$(BIN)/python scripts/golden_plans.py specs --out _build/golden/specs.json
	$(VLLM_REF)/bin/python scripts/golden_plans.py plan --specs _build/golden/specs.json --out data/vllm/golden-plans.json

clean:
	rm -rf _build .pytest_cache .hypothesis

distclean: clean
	rm -rf $(VENV) $(SRT) book/assets/vendor
