# MLSys Labs. Two commands on a fresh machine:
#   make course   set everything up, then open the course in JupyterLab
#   make test     set everything up, then run the whole test suite
# Other targets: make setup | make grade [IMPL=exercises LAB=05] | make autograder | make notebooks | make bench

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.labkit-installed
IMPL   ?= exercises
LAB    ?=

.PHONY: setup course test grade autograder notebooks bench clean

setup: $(STAMP)

# torch==2.13.0 resolves to the local CPU wheel where one is provided (as on the
# course machines) and to the CUDA build from the registry on a GPU box.
# The grader sandboxes submissions with bubblewrap; install it where apt-get can (as root), else say so.
$(STAMP): pyproject.toml
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; }; } || \
		echo "note: bubblewrap is not installed; the grader will run submissions without its sandbox"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (MLSys Labs)" >/dev/null
	touch $(STAMP)

# JupyterLab refuses to run as root unless told to (containers, course VMs).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

course: setup
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) notebooks/00_welcome.ipynb

# Unit, distributed, grading and notebook (nbval) tests. Solutions are graded by default.
test: setup
	$(PY) -m pytest -ra --durations=15 --nbval --nbval-sanitize-with notebooks/nbval_sanitize.cfg \
		--nbval-current-env tests notebooks

grade: setup
	$(PY) -m labkit.grade --impl $(IMPL) $(if $(LAB),--lab $(LAB),)

# Gradescope's autograder zip (setup.sh, run_autograder, the course's source): upload build/autograder.zip.
autograder: setup
	$(PY) -m labkit.grading.gradescope build build/autograder.zip

# Rebuild every notebook from notebooks/_src and execute it (stores outputs for nbval).
notebooks: setup
	$(PY) -m labkit.nbbuild notebooks/_src/*.py

bench: setup
	for f in benchmarks/*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache
