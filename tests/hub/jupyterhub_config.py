"""JupyterHub configuration of tests/browser/test_hub.py: a real hub on loopback, logged in through the
reference catalog's embedded issuer (device grant), spawning local single-user servers.

Parameters come from ``LAKESESSION_TEST_HUB_*`` variables set by the test (ports, paths, URLs)."""

import os
import sys

from jupyterhub.spawner import SimpleLocalProcessSpawner

import lakesession.hub
from lakesession.hub.authenticator import DeviceCodeAuthenticator

c = get_config()  # type: ignore[name-defined]  # noqa: F821

env = os.environ
run_dir = env["LAKESESSION_TEST_HUB_DIR"]

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(env["LAKESESSION_TEST_HUB_PORT"])
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(env["LAKESESSION_TEST_HUB_API_PORT"])
c.JupyterHub.db_url = f"sqlite:///{run_dir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{run_dir}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = f"{run_dir}/jupyterhub.pid"
c.JupyterHub.log_level = "DEBUG"
c.ConfigurableHTTPProxy.command = [env["LAKESESSION_TEST_HUB_CHP"]]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env['LAKESESSION_TEST_HUB_PROXY_API_PORT']}"
c.ConfigurableHTTPProxy.pid_file = f"{run_dir}/proxy.pid"
c.ConfigurableHTTPProxy.debug = True

c.JupyterHub.authenticator_class = DeviceCodeAuthenticator
c.DeviceCodeAuthenticator.issuer = env["LAKESESSION_TEST_HUB_ISSUER"]
c.DeviceCodeAuthenticator.client_id = "jupyterhub"
c.Authenticator.allow_all = True

c.JupyterHub.spawner_class = SimpleLocalProcessSpawner
c.SimpleLocalProcessSpawner.home_dir_template = f"{run_dir}/home/{{username}}"
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.debug = True
# the test talks to the server's REST API only: skip loading the UI extensions (seconds per spawn)
c.Spawner.args = [
    arg
    for ext in ("jupyterlab", "jupyter_lsp", "jupyter_server_terminals", "notebook_shim")
    for arg in ("--ServerApp.jpserver_extensions", f"{ext}=False")
]
if os.geteuid() == 0:  # CI containers run as root; jupyter_server refuses that unless told
    c.Spawner.args.append("--allow-root")
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.env_keep = ["PATH", "PYTHONPATH", "LANG", "LC_ALL", "JAVA_HOME", "VIRTUAL_ENV", "LAKESESSION_JARS"]
# the spawned server's HOME is fresh: point it at the test's jar cache (no re-assembly)
c.Spawner.environment = {
    "LAKESESSION_CACHE_DIR": env["LAKESESSION_TEST_HUB_CACHE_DIR"],
    "LAKESESSION_SPARK_MASTER": "local[1]",
    "PYSPARK_SUBMIT_ARGS": "--conf spark.ui.enabled=false --conf spark.sql.shuffle.partitions=2 pyspark-shell",
}

# a service for the test itself: reads auth_state to compare token hashes (never the tokens)
c.JupyterHub.services = [{"name": "lakesession-test", "api_token": env["LAKESESSION_TEST_HUB_SERVICE_TOKEN"]}]
c.JupyterHub.load_roles = [
    {"name": "lakesession-test", "scopes": ["admin:auth_state", "read:users"], "services": ["lakesession-test"]}
]

# what this test is about: lakesession's hooks and roles (merged into the settings above)
lakesession.hub.configure(
    c,
    catalog_uri=env["LAKESESSION_TEST_HUB_CATALOG"],
    issuer=env["LAKESESSION_TEST_HUB_ISSUER"],
    warehouse=env["LAKESESSION_TEST_HUB_WAREHOUSE"],
    principal_claim=env.get("LAKESESSION_TEST_HUB_PRINCIPAL_CLAIM") or None,
    auth_refresh_age=int(env.get("LAKESESSION_TEST_HUB_REFRESH_AGE", "2")),
)
