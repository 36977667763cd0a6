PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# A Python path of the user's shell would put another copy of the packages (or another Python's) before the venv's.
unexport PYTHONPATH PYTHONHOME

# pip settings a shell may export that change where or what `pip install` installs (user site, --target, --prefix,
# --root, no dependencies, hashes or binaries only, no build isolation): the venv's install must not follow them.
# Where packages come from (index, find-links, proxy, certificates, cache) is the user's and kept; PIP_USER=0 also
# overrides `user = true` in a pip.conf.
unexport PIP_TARGET PIP_PREFIX PIP_ROOT PIP_NO_DEPS PIP_REQUIRE_HASHES PIP_ONLY_BINARY PIP_NO_BINARY \
  PIP_NO_BUILD_ISOLATION PIP_CONSTRAINT PIP_REQUIREMENT PIP_EDITABLE_MODE PIP_IGNORE_INSTALLED PIP_DRY_RUN PIP_SRC
export PIP_USER := 0

.PHONY: venv test test-python quick e2e demo bench clean

# A venv without a working pip (Debian's python3.11 without the python3.11-venv package leaves one, and fails) is
# made again rather than used; a failed creation leaves no venv behind that the next run would take as made.
$(STAMP): pyproject.toml indexer/load/typed/_typer.c
	@$(BIN)/python -m pip --version >/dev/null 2>&1 || $(PY) -m venv --clear $(VENV) \
	  || python3 -m venv --clear $(VENV) || { rm -rf $(VENV); echo "make: could not create $(VENV) with $(PY) or" \
	  "python3: install Python 3.11 with its venv module (Debian/Ubuntu: apt-get install python3.11-venv), or name" \
	  "one with make PY=/path/to/python3.11" >&2; exit 1; }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The developer's loop: the suite without the tests marked slow (tests/conftest.py SLOW). CI runs `make test`.
quick: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -n auto --dist loadfile $(PYTEST_ARGS)

# The tests of everything that types lines (the file load, the poller's decode workers and commits), run again on the
# Python typing paths alone, as on a machine where the C block typer did not build: the two paths must not drift.
PYTHON_IMPL_TESTS := tests/load/test_typing_impl.py tests/load/test_typer.py tests/load/test_fastpath.py \
  tests/load/test_copytext.py \
  tests/load/test_assemble.py tests/load/test_ingest.py tests/load/test_resume.py tests/load/test_load_probe.py \
  tests/load/test_load_deadlock_retry.py tests/load/test_reliability_copy_errors.py tests/poller/test_poller_decode_workers.py \
  tests/poller/test_poller_devnet.py tests/poller/test_poller_kill.py tests/poller/test_poller_durability.py
test-python: $(STAMP)
	INDEXER_IMPL=python $(BIN)/python -m pytest $(PYTHON_IMPL_TESTS) $(PYTEST_ARGS)

# The checks that need programs CI machines may lack: installs Debian's chromium (the report in a real browser) and
# prometheus (promtool: the Prometheus rule unit tests), then runs those tests; `make test` skips them, saying so.
e2e: $(STAMP)
	@command -v chromium >/dev/null && command -v promtool >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update && $$SUDO apt-get install -y --no-install-recommends chromium prometheus; }
	$(BIN)/python -m pytest -ra tests/reports/test_report_browser.py tests/test_deploy.py $(PYTEST_ARGS)
	cd deploy && promtool check config prometheus/prometheus.yml && promtool test rules prometheus/tests/indexer_test.yml

# The demo writes the devnet's records into its database: a DATABASE_URL the shell exports for other programs is not
# taken as that database (the embedded server is); `make demo DATABASE_URL=postgresql://...` chooses one.
ifeq ($(origin DATABASE_URL),environment)
DEMO_ENV := env -u DATABASE_URL
endif
demo: $(STAMP)
ifeq ($(origin DATABASE_URL),environment)
	@echo "make demo: DATABASE_URL is set in the environment and not used: the demo runs on the embedded PostgreSQL" \
	  "(make demo DATABASE_URL=... runs it on that database)" >&2
endif
	$(DEMO_ENV) $(BIN)/indexer demo

bench: $(STAMP)
	$(BIN)/python bench/ingest_bench.py

clean:
	rm -rf $(VENV) .indexer build *.egg-info
