"""docker-compose.yml and the Dockerfile, checked without a Docker engine: the services a
node needs, their commands (real CLI commands and options), the environment variables the
code reads, health checks, and the GPU reservation for the workers. `docker compose
config -q` runs too where the compose plugin exists."""

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from dinfer_batch.cli import main

REPO = Path(__file__).resolve().parents[2]
SOURCES = [*REPO.glob("dinfer_batch/**/*.py"), *REPO.glob("dinfer_workers/*.py")]


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_a_node_has_every_service_with_health_checks(compose):
    services = compose["services"]
    assert set(services) == {"redis", "postgres", "pgbouncer", "migrate", "beat", "api",
                             "worker"}
    for name in ("redis", "postgres", "pgbouncer", "beat", "api", "worker"):
        assert services[name]["healthcheck"]["test"], name
    assert "postgres-data:/var/lib/postgresql/data" in services["postgres"]["volumes"]
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["migrate"]["restart"] == "no"
    for name in ("beat", "api", "worker"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"}


def test_the_image_runs_the_cli():
    entrypoint = re.search(r'ENTRYPOINT \["(.+?)"\]', (REPO / "Dockerfile").read_text())
    assert entrypoint and entrypoint.group(1) == "dinfer-batch"


@pytest.mark.parametrize("service", ["migrate", "beat", "api", "worker"])
def test_commands_are_real_cli_commands(compose, service):
    command = compose["services"][service]["command"]
    words = [w for w in command if not w.startswith("-")]
    target = main.commands[command[0]]
    if words[1:] and hasattr(target, "commands"):  # a group: `db upgrade`
        target = target.commands[words[1]]
    options = {opt for param in target.params for opt in param.opts}
    assert all(w in options for w in command if w.startswith("-")), command


def test_the_worker_supervises_every_gpu(compose):
    assert compose["services"]["worker"]["command"] == ["worker", "--gpus", "all"]


def test_workers_reserve_every_gpu(compose):
    devices = compose["services"]["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]


def test_environment_names_are_the_ones_the_code_reads(compose):
    source = "\n".join(path.read_text() for path in SOURCES)
    read = set(re.findall(r'"(DINFER_BATCH_[A-Z_]+)"', source))
    for name in ("migrate", "beat", "api", "worker"):
        env = compose["services"][name]["environment"]
        assert {"DINFER_BATCH_DATABASE_URL", "DINFER_BATCH_BROKER_URL",
                "DINFER_BATCH_MODEL_DIR"} <= set(env)
        assert set(env) <= read, set(env) - read
    assert compose["services"]["worker"]["environment"]["DINFER_BATCH_MODEL_DIR"] == "/models"
    assert any(v.endswith(":/models:ro") for v in compose["services"]["worker"]["volumes"])


@pytest.mark.skipif(subprocess.run(["docker", "compose", "version"], capture_output=True,
                                   check=False).returncode != 0 if shutil.which("docker")
                    else True, reason="no docker compose here")
def test_docker_compose_config_is_valid():
    subprocess.run(["docker", "compose", "-f", str(REPO / "docker-compose.yml"), "config",
                    "-q"], check=True, cwd=REPO)


def test_the_api_is_published_and_checked_on_readyz(compose):
    api = compose["services"]["api"]
    assert api["ports"] == ["8000:8000"]
    assert "/readyz" in " ".join(api["healthcheck"]["test"])
    assert api["environment"]["DINFER_BATCH_FILES_DIR"] == "/files"


def test_the_fleet_reaches_postgres_through_pgbouncer_in_transaction_pooling(compose):
    """Workers, the API and beat through PgBouncer, the migration directly; PgBouncer
    (Debian's package) in transaction pooling, in front of the postgres service."""
    services = compose["services"]
    for name in ("beat", "api", "worker"):
        assert "@pgbouncer:6432/" in services[name]["environment"]["DINFER_BATCH_DATABASE_URL"]
        assert services[name]["depends_on"]["pgbouncer"] == {"condition": "service_healthy"}
    assert "@postgres:5432/" in services["migrate"]["environment"]["DINFER_BATCH_DATABASE_URL"]
    context = REPO / services["pgbouncer"]["build"]
    assert "apt-get install" in (context / "Dockerfile").read_text()
    ini = configparser.ConfigParser(inline_comment_prefixes=(";",))
    ini.read_string((context / "pgbouncer.ini").read_text())
    assert ini["pgbouncer"]["pool_mode"] == "transaction"
    assert "host=postgres port=5432" in ini["databases"]["dinfer"]
    # room for 1,000 workers' budgets of 2
    assert int(ini["pgbouncer"]["max_client_conn"]) >= 2000
