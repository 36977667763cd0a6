PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test test-python quick e2e demo bench clean

$(STAMP): pyproject.toml indexer/load/typed/_typer.c
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
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

demo: $(STAMP)
	$(BIN)/indexer demo

bench: $(STAMP)
	$(BIN)/python bench/ingest_bench.py

clean:
	rm -rf $(VENV) .indexer build *.egg-info
