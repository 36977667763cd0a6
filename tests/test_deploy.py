"""deploy/ checked without Docker: the compose file and the files it references, Grafana provisioning, every
dashboard panel's SQL run as indexer_reader on the demo's data, Prometheus rules under promtool (when installed),
the systemd units."""
from __future__ import annotations

import configparser
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import psycopg
import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
COMPOSE = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
DASHBOARDS = {p.name: json.loads(p.read_text()) for p in sorted((DEPLOY / "grafana/dashboards").glob("*.json"))}
DATASOURCES = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/indexer.yml").read_text())["datasources"]


def _panels():
    for name, dash in DASHBOARDS.items():
        for panel in dash["panels"]:
            for target in panel["targets"]:
                if "rawSql" in target:
                    yield pytest.param(dash, panel, target["rawSql"], id=f"{name}:{panel['title']}")


def test_compose_runs_the_whole_stack_in_order():
    services = COMPOSE["services"]
    assert {"postgres", "indexer-migrate", "indexer-run", "indexer-alerts", "prometheus", "alertmanager",
            "grafana"} <= set(services)
    assert services["indexer-migrate"]["command"] == ["migrate"]
    assert services["indexer-migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for svc in ("indexer-run", "indexer-alerts"):
        assert services[svc]["depends_on"]["indexer-migrate"]["condition"] == "service_completed_successfully"
    assert services["indexer-run"]["command"][0] == "run" and services["indexer-alerts"]["command"] == ["alerts"]
    for svc in ("indexer-migrate", "indexer-run", "indexer-alerts"):  # password from a secret, config from a file
        assert services[svc]["environment"]["INDEXER_DB_PASSWORD_FILE"] == "/run/keys/indexer/indexer_db_password"
        assert services[svc]["env_file"] == "indexer.env"
    env_text = (DEPLOY / "indexer.env").read_text()
    assert not re.search(r"(?i)password\s*=|DATABASE_URL\s*=", env_text)


def test_every_file_the_compose_file_names_exists():
    for name, svc in COMPOSE["services"].items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source}"
        build = svc.get("build")
        if build:
            assert (DEPLOY / build["context"] / build["dockerfile"]).is_file()
        for secret in svc.get("secrets", []):
            assert secret in COMPOSE["secrets"], f"{name}: secret {secret} not declared"
    readme = (DEPLOY / "secrets/README.md").read_text()
    for secret, spec in COMPOSE["secrets"].items():  # secrets are created by the operator, never committed
        assert spec["file"] == f"./secrets/{secret}" and f"`{secret}`" in readme
    assert "*" in (DEPLOY / "secrets/.gitignore").read_text().split()
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    for copied in re.findall(r"^COPY (?!--from=)(\S+)", dockerfile, re.M):  # not the copies between stages
        assert (DEPLOY.parent / copied).exists(), copied


def test_prometheus_and_grafana_point_at_the_services():
    prom = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    target = prom["scrape_configs"][0]["static_configs"][0]["targets"][0]
    host, port = target.split(":")
    run = COMPOSE["services"][host]
    assert f"0.0.0.0:{port}" in run["command"] and port in run["expose"]
    assert prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["alertmanager:9093"]
    assert list((DEPLOY / "prometheus").glob(prom["rule_files"][0]))
    db = next(d for d in DATASOURCES if d["type"] == "grafana-postgresql-datasource")
    assert db["user"] == "indexer_reader" and db["url"].split(":")[0] == "postgres"
    assert db["secureJsonData"]["password"] == "$__file{/run/keys/grafana/reader_db_password}"
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/indexer.yml").read_text())["providers"][0]
    assert any(v.endswith(":" + provider["options"]["path"] + ":ro") for v in COMPOSE["services"]["grafana"]["volumes"])
    init = (DEPLOY / "postgres/init-roles.sh").read_text()
    assert "CREATE ROLE indexer_reader LOGIN" in init


# the user each image runs as (uid, gid): the official images' documented users, and the indexer image's own
IMAGE_USERS = {"postgres:16": (999, 999), "grafana/grafana:11.1.0": (472, 0), "busybox:1.36": (0, 0)}
KEYS = "/run/keys/"


def _grants() -> dict[str, tuple[int, int, set[str]]]:
    grants = {}
    for grant in COMPOSE["services"]["secrets-init"]["environment"]["SECRET_GRANTS"].split():
        service, uid, gid, names = grant.split(":")
        grants[service] = (int(uid), int(gid), set(names.split(",")))
    return grants


def _runs_as(svc: dict) -> tuple[int, int]:
    if "user" in svc:
        uid, _, gid = str(svc["user"]).partition(":")
        return int(uid), int(gid or uid)
    if "build" in svc:
        dockerfile = (DEPLOY / svc["build"]["context"] / svc["build"]["dockerfile"]).read_text()
        user = re.findall(r"^USER (\S+)", dockerfile, re.M)[-1]
        uid = int(re.search(rf"useradd [^\n]*--uid (\d+)[^\n]* {user}$", dockerfile, re.M).group(1))
        return uid, uid  # --user-group: a group of the same id
    return IMAGE_USERS[svc["image"]]


def _secret_paths(name: str, svc: dict) -> set[str]:
    """Every /run/keys/... path the service reads: its environment, and the files it mounts from deploy/."""
    texts = [str(v) for v in (svc.get("environment") or {}).values()]
    for volume in svc.get("volumes", []):
        source = volume.split(":")[0]
        if source.startswith("."):
            path = DEPLOY / source
            texts += [p.read_text() for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()]
    return {m for t in texts for m in re.findall(r"/run/keys/[\w/]+", t)}


def _starts_after(name: str, first: str) -> bool:
    """The service waits (directly or through the services it waits for) for ``first`` to complete."""
    depends = COMPOSE["services"][name].get("depends_on") or {}
    if isinstance(depends, list):
        return False  # the short form only waits for the start, not for completion
    return any((dep == first and spec["condition"] == "service_completed_successfully")
               or (dep != first and spec["condition"] != "service_started" and _starts_after(dep, first))
               for dep, spec in depends.items())


def test_every_service_can_read_each_secret_it_uses():
    grants, services = _grants(), COMPOSE["services"]
    assert services["secrets-init"]["secrets"] and set(services["secrets-init"]["secrets"]) == set(COMPOSE["secrets"])
    assert _runs_as(services["secrets-init"]) == (0, 0)  # root reads the host's 0600 files
    users = 0
    for name, svc in services.items():
        if name == "secrets-init":
            continue
        # a compose file secret would be a bind mount with the host's owner and mode: none is mounted directly
        assert "secrets" not in svc, f"{name}: mounts compose secrets directly"
        paths = _secret_paths(name, svc)
        if not paths:
            continue
        users += 1
        assert f"keys:{KEYS.rstrip('/')}:ro" in svc["volumes"], name
        assert _starts_after(name, "secrets-init"), f"{name} may start before its secrets are installed"
        uid, gid = _runs_as(svc)
        for path in paths:
            directory, secret = path[len(KEYS):].split("/")
            owner_uid, owner_gid, names = grants[directory]
            assert secret in names, f"{name} reads {path}, which secrets-init does not install"
            # installed owner-only (0400 in a 0500 directory): readable exactly when the service runs as the owner
            assert uid == owner_uid, f"{name} runs as uid {uid} but {path} belongs to uid {owner_uid}"
    assert users == 5  # postgres, grafana and the three indexer services


ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


@pytest.mark.skipif(not ROOT, reason="installing secrets for other users needs root")
def test_secrets_init_installs_each_secret_for_its_service_only(tmp_path):
    source, keys = tmp_path / "from", tmp_path / "keys"
    source.mkdir()
    keys.mkdir()
    for secret in COMPOSE["secrets"]:
        (source / secret).write_text(f"pw-{secret}\n")
        (source / secret).chmod(0o600)  # root-owned 0600 on the host
    env = {"PATH": os.environ["PATH"], "SECRETS_FROM": str(source), "SECRETS_TO": str(keys),
           "SECRET_GRANTS": COMPOSE["services"]["secrets-init"]["environment"]["SECRET_GRANTS"]}
    run = subprocess.run(["sh", str(DEPLOY / "secrets-init.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    for service, (uid, gid, names) in _grants().items():
        directory = (keys / service).stat()
        assert (directory.st_uid, directory.st_gid, directory.st_mode & 0o777) == (uid, gid, 0o500)
        assert {p.name for p in (keys / service).iterdir()} == names
        for secret in names:
            st = (keys / service / secret).stat()
            assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (uid, gid, 0o400)
            assert (keys / service / secret).read_text() == f"pw-{secret}\n"
    (source / "reader_db_password").unlink()
    run = subprocess.run(["sh", str(DEPLOY / "secrets-init.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "reader_db_password is missing: create deploy/secrets/reader_db_password" in run.stderr


def test_dashboards_are_what_the_builder_writes_and_use_provisioned_sources():
    spec = importlib.util.spec_from_file_location("build_dashboards", DEPLOY / "grafana/build_dashboards.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    assert {n: json.loads(t) for n, t in builder.render().items()} == DASHBOARDS
    uids = {d["uid"] for d in DATASOURCES}
    assert len({d["uid"] for d in DASHBOARDS.values()}) == len(DASHBOARDS) == 4
    for dash in DASHBOARDS.values():
        for panel in dash["panels"]:
            assert panel["datasource"]["uid"] in uids and all(t["datasource"]["uid"] in uids for t in panel["targets"])
    host = DASHBOARDS["host.json"]
    assert [v["name"] for v in host["templating"]["list"]] == ["participant"]


def _reader(url):
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("SET ROLE indexer_reader")  # the role Grafana logs in as: schema api only
    return conn


def _variables(conn, dash) -> dict[str, str]:
    values = {}
    for var in dash["templating"]["list"]:
        rows = conn.execute(var["query"]).fetchall()
        assert rows, f"variable {var['name']} has no values"
        values[var["name"]] = rows[0][0]
    return values


@pytest.mark.parametrize("dash, panel, sql", list(_panels()))
def test_panel_sql_returns_its_columns_as_indexer_reader(demo_db_url, dash, panel, sql):
    with _reader(demo_db_url) as conn:
        missing = [v for v in re.findall(r"\bapi\.(\w+)", sql)
                   if conn.execute("SELECT to_regclass(%s)", (f"api.{v}",)).fetchone()[0] is None]
        assert missing == [], f"{panel['title']} reads views that do not exist"
        for name, value in _variables(conn, dash).items():
            sql = sql.replace("${" + name + "}", value.replace("'", "''"))
        assert "$" not in sql
        cur = conn.execute(sql)
        columns = [c.name for c in cur.description]
        rows = cur.fetchall()
    wanted = list(panel["transformations"][0]["options"]["indexByName"])
    assert columns == wanted
    assert rows, f"{panel['title']}: no rows on the demo's data"


def test_reader_cannot_read_outside_api(demo_db_url):
    with _reader(demo_db_url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT 1 FROM net.failure LIMIT 1")


def test_metrics_named_in_dashboards_and_rules_are_exported(demo_db_url):
    from indexer.observe.server import MetricsServer

    with MetricsServer(("127.0.0.1", 0), demo_db_url, 900) as server:
        server.metrics.observe_cycle(1.0, "error")
        text = httpx.get(f"http://{server.address}/metrics", timeout=10).text
    exported = set(re.findall(r"^(indexer_\w+?)(?:\{| )", text, re.M))
    rules = yaml.safe_load((DEPLOY / "prometheus/rules/indexer.yml").read_text())["groups"][0]["rules"]
    used = {m for r in rules for m in re.findall(r"\bindexer_[a-z_]+", r["expr"])}
    for dash in DASHBOARDS.values():
        for panel in dash["panels"]:
            used |= {m for t in panel["targets"] for m in re.findall(r"\bindexer_[a-z_]+", t.get("expr", ""))}
    assert used and used <= exported, used - exported


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make e2e installs it: apt-get install "
                                              "prometheus); Prometheus rule unit tests skipped")
def test_prometheus_rules_pass_promtool():
    for args in (["check", "config", "prometheus/prometheus.yml"],
                 ["test", "rules", "prometheus/tests/indexer_test.yml"]):
        run = subprocess.run([PROMTOOL, *args], cwd=DEPLOY, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout + run.stderr


def _unit(name):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(DEPLOY / name)
    return parser


def test_systemd_units_share_the_compose_configuration():
    units = {name: _unit(f"indexer-{name}.service") for name in ("run", "alerts")}
    for name, unit in units.items():
        svc = unit["Service"]
        assert svc["EnvironmentFile"].endswith("/indexer.env")  # deploy/indexer.env, as compose's env_file
        assert "indexer_db_password" in svc["LoadCredential"]  # the compose secret's name
        assert svc["ExecStart"].split()[0].endswith("/deploy/indexer-entrypoint.sh")
    assert units["run"]["Service"]["ExecStart"].split()[1:] == ["run", "--no-alerts"]
    assert units["run"]["Service"]["ExecStartPre"].split()[1:] == ["migrate"]
    assert units["alerts"]["Service"]["ExecStart"].split()[1:] == ["alerts"]
    assert COMPOSE["services"]["indexer-run"]["command"][-1] == "--no-alerts"
