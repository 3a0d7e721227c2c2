# Two commands do all the set-up on a fresh machine:
#   make run    create/refresh .venv, then train CartPole on a local cluster to its stop value
#   make test   create/refresh .venv, then run the whole test suite
# Every install goes through constraints.txt (torch is pinned to the local CPU build).

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# test processes: most tests wait on servers, subprocesses and Docker, so more processes than the 2 cores pay
PYTEST_WORKERS ?= 4

.PHONY: run serial test test-long test-fast lint docs browser docker kubectl netns slurm bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python setup.cfg pyproject.toml constraints.txt
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test,mujoco,pixels,docs,lab]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/parallel-rl run -c configs/cartpole_dqn_parallel.py

serial: $(STAMP)
	$(BIN)/parallel-rl serial -c configs/cartpole_dqn.py

test: $(STAMP) browser docker kubectl netns slurm lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal -m "not partition and not multirun and not long" $(PYTEST_ARGS)

# the tests `make test` leaves out to stay under 10 minutes on a 2-core machine; CI (.ci/run) runs them after it:
# the network-partition tests (tests/test_faults.py: each holds a partition between hosts for 30 s inside a run of two
# minutes, mostly waiting) and the ones that train many runs, each a process that imports torch (sweeps, searches,
# PBT, the service's pool: tests/test_lab.py, test_pbt.py, test_runs.py; their bad-input tests stay in `make test`)
# and the `long` ones: the stress tests (a run beside 2 busy loops per CPU, or its processes killed in a loop:
# tests/test_under_load.py, test_chaos.py), whose load slowed every test beside them, and the long end-to-end runs whose
# path a shorter test in `make test` also takes (CartPole on S3, on four hosts, with two learner ranks; the Pong configs)
test-long: $(STAMP) netns
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal -m "partition or multirun or long" $(PYTEST_ARGS)

# pyflakes' rules (unused or undefined names, redefinitions) over the whole tree: pyproject.toml's [tool.ruff];
# the formatter's check (the tree is formatted: `ruff format .` before committing); then mypy over the typed seams
# (protocol, storage backends, data flows): pyproject.toml's [tool.mypy], strict there
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# the docs site (mkdocs.yml: Material theme, nav over docs/) into site/, every warning an error (a broken link
# between pages included); tests/test_docs_site.py builds it the same way once per test run
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# the dashboard test drives Debian's headless Chromium; install it when missing (needs root and apt)
browser:
	@command -v chromedriver >/dev/null 2>&1 || { \
	  echo "installing chromium and chromium-driver (Debian) for the dashboard test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) \
	    >/dev/null || echo "could not install chromium: the dashboard test will fail"; }

# the compose test drives a real Docker engine: install what is missing (engine, Compose v2, base image;
# needs root and apt, else that one test fails saying what to install)
docker:
	@.ci/docker.sh all || echo "could not set up Docker: the docker compose test will fail"

# the Kubernetes manifests' test renders them with `kubectl kustomize` (Debian's kubernetes-client)
kubectl:
	@command -v kubectl >/dev/null 2>&1 || { \
	  echo "installing kubernetes-client (Debian) for the Kubernetes manifests' test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client) \
	    >/dev/null || echo "could not install kubernetes-client: the Kubernetes manifests' test will fail"; }

# the separate-hosts tests (tests/support/hosts.py) make network namespaces: ip, unshare, iptables (as root)
netns:
	@command -v ip >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1 && command -v iptables >/dev/null 2>&1 || { \
	  echo "installing iproute2, util-linux and iptables (Debian) for the separate-hosts tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 util-linux iptables) \
	    >/dev/null || echo "could not install them: the separate-hosts tests will be skipped"; }

# tests/test_slurm.py runs a real Slurm (Debian's 22.05: munged, slurmctld, slurmd, slurmdbd on a private MariaDB for
# sacct) from a temporary directory: install what is missing (needs root and apt, else those tests are skipped)
SLURM_PACKAGES := slurmctld slurmd slurmdbd slurm-client munge mariadb-server
slurm:
	@{ command -v slurmctld && command -v slurmd && command -v slurmdbd && command -v sbatch && command -v munged \
	   && command -v mariadbd; } >/dev/null 2>&1 || { \
	  echo "installing $(SLURM_PACKAGES) (Debian) for the Slurm tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SLURM_PACKAGES)) \
	    >/dev/null || echo "could not install Slurm: the Slurm tests will be skipped"; }

# skip the long end-to-end tests and the Docker one (CI runs everything)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal -m "not slow and not docker" $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/serial_cartpole.py
	$(BIN)/python benchmarks/hot_loops.py

clean:
	rm -rf $(VENV) build site *.egg-info
