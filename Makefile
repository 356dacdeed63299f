# MLSys Labs. Two commands on a fresh machine:
#   make course   set everything up, then open the course in JupyterLab
#   make test     set everything up, then run the whole test suite
# Other targets: make setup | make grade [IMPL=exercises LAB=05] | make autograder | make notebooks | make bench
#                make exercises (write exercises/ and solutions/ from labkit's marked answers)
#                make slides [LAB=05] | make demo LAB=05 [PORT=8866]   (instructor mode: README "For instructors")
#                make test-gpu, make gpu-smoke (on a CUDA machine; gpu-smoke also with a preinstalled
#                torch and no network: make gpu-smoke PYTHON=python3)

SHELL  := /bin/bash
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.labkit-installed
IMPL   ?= exercises
LAB    ?=

.PHONY: setup course test test-gpu gpu-smoke grade autograder notebooks exercises slides demo bench clean

setup: $(STAMP)

# System packages the suite uses, installed where apt-get can (as root), else said:
# bubblewrap (the grader's sandbox), Chromium (the browser tier drives it with Playwright), npm
# (make slides fetches reveal.js and the widget renderer with it, once), and a C compiler with the
# headers of $(PYTHON): compiled Triton kernels and torch.compile (Inductor) build C extensions at
# run time.
SYSTEM_PACKAGES := bwrap:bubblewrap chromium:chromium npm:npm cc:gcc
HAS_PYTHON_H := import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
APT_INSTALL = { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		  { apt-get install -y -qq $(1) >/dev/null 2>&1 || \
		    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq $(1) >/dev/null 2>&1; }; }; } || \
		echo "note: $(1) is not installed; $(2)"

$(STAMP): pyproject.toml
	@for pair in $(SYSTEM_PACKAGES); do cmd=$${pair%%:*}; pkg=$${pair##*:}; \
		command -v $$cmd >/dev/null 2>&1 && continue; \
		$(call APT_INSTALL,$$pkg,the tests that need it will say so and skip); \
	done
	@$(PYTHON) -c '$(HAS_PYTHON_H)' || $(call APT_INSTALL,python3-dev,compiled Triton kernels and torch.compile need Python.h)
	@# torch==2.13.0 resolves to the local CPU wheel where one is provided (as on the
	@# course machines) and to the CUDA build from the registry on a GPU box.
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (MLSys Labs)" >/dev/null
	touch $(STAMP)

# JupyterLab refuses to run as root unless told to (containers, course VMs).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

# JupyterLab with the RISE extension (a dependency): View > Render as slideshow presents a lab live.
course: setup
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) notebooks/00_welcome.ipynb

# Unit, distributed, grading and notebook (nbval) tests. Solutions are graded by default.
# Two pytest workers, a file each at a time (a notebook's cells share one kernel, so a file stays whole),
# and every process they start with labkit.nbbuild.TEST_ENV (one torch thread), as the stored outputs
# were made: no oversubscribed cores, and the last digits of sums match on any machine.
test: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist loadfile -ra --durations=15 --nbval --nbval-sanitize-with notebooks/nbval_sanitize.cfg \
		--nbval-current-env tests notebooks

# The GPU tier (on a machine with a CUDA GPU): compiled kernels, NCCL, notebooks end to end, and the
# benchmarks; its report goes to benchmarks/results/gpu-tier.md (commit it with the benchmark tables).
test-gpu: setup
	@$(PY) -W ignore -m labkit.env --require-gpu    # one line saying why not: none, CPU wheel, old driver
	$(PY) -m labkit.env > benchmarks/results/gpu-tier.md
	set -o pipefail; $(PY) -m pytest -ra --nbval --nbval-sanitize-with notebooks/nbval_sanitize.cfg \
		--nbval-current-env --nbval-lax tests notebooks -k "not browser" 2>&1 | tee -a benchmarks/results/gpu-tier.md
	$(MAKE) bench

# At most ten minutes on one GPU: environment, compiled kernels vs torch, the access recorder, NCCL,
# DDP/TP/FSDP steps vs PyTorch's, bit-identical resume, CUDA graphs, notebooks 04 and 05 (nbval-lax);
# report in benchmarks/results/gpu-smoke.md. Uses the interpreter it is given and labkit from this
# checkout, no install step (a GPU box's own torch: make gpu-smoke PYTHON=python3). On a machine
# without a usable GPU it exits with one line saying why.
gpu-smoke:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m labkit.gpu_smoke

grade: setup
	$(PY) -m labkit.grade --impl $(IMPL) $(if $(LAB),--lab $(LAB),)

# Gradescope's autograder zip (setup.sh, run_autograder, the course's source): upload build/autograder.zip.
autograder: setup
	$(PY) -m labkit.grading.gradescope build build/autograder.zip

# Rebuild every notebook from notebooks/_src and execute it (stores outputs for nbval).
notebooks: setup
	$(PY) -m labkit.nbbuild notebooks/_src/*.py

# exercises/ (stubs) and solutions/ (answers) from the answers marked in labkit (labkit/grading/generate.py).
exercises: setup
	$(PY) -m labkit.grading.generate

# Static reveal.js slides of every lab (or LAB=NN) under build/slides/, with saved outputs and
# widget state; they open offline from a file URL (reveal.js and the widget renderer are fetched
# with npm once, into build/slides/).
slides: setup
	@$(PY) -m labkit.slides export $(if $(LAB),--lab $(LAB),)

# One lab's demo path as a Voila page (outputs and widgets, no code) on 127.0.0.1:$(PORT).
PORT ?= 8866
demo: setup
	@$(PY) -m labkit.demo $(if $(LAB),--lab $(LAB),) --port $(PORT)

bench: setup
	for f in benchmarks/*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache
