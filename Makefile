PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test e2e demo bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The checks that need programs CI machines may lack: installs Debian's chromium (the report in a real browser) and
# prometheus (promtool: the Prometheus rule unit tests), then runs those tests; `make test` skips them, saying so.
e2e: $(STAMP)
	@command -v chromium >/dev/null && command -v promtool >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update && $$SUDO apt-get install -y --no-install-recommends chromium prometheus; }
	$(BIN)/python -m pytest -ra tests/test_report_browser.py tests/test_deploy.py $(PYTEST_ARGS)
	cd deploy && promtool check config prometheus/prometheus.yml && promtool test rules prometheus/tests/indexer_test.yml

demo: $(STAMP)
	$(BIN)/indexer demo

bench: $(STAMP)
	$(BIN)/python bench/ingest_bench.py

clean:
	rm -rf $(VENV) .indexer build *.egg-info
