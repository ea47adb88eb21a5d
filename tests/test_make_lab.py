"""`make lab` starts JupyterLab on the project's venv with STRUCTATTN_DATA set as
`make study` sets it, so a notebook opened by hand reads the same data, and with widget
state saved in the notebook, so it reopens without "model not found"."""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_starts_jupyterlab_with_the_data_path(tmp_path):
    if not (ROOT / ".venv" / "bin" / "jupyter").exists():
        pytest.skip("no .venv/bin/jupyter: run `make test` (it builds the venv) first")
    data = tmp_path / "data"
    (data / "ptb").mkdir(parents=True)
    port = free_port()
    args = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token=t --ServerApp.port_retries=0"
    env = {**os.environ, "STRUCTATTN_DATA": str(data), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    proc = subprocess.Popen(
        ["make", "-s", "lab", f"LAB_ARGS={args}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline, status = time.time() + 90, None
        while time.time() < deadline and status is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token=t") as r:
                    status = r.status
            except OSError:
                time.sleep(1)
        assert status == 200, "JupyterLab did not answer within 90 s"
        lab = subprocess.run(
            ["pgrep", "-f", "--", f"--port={port}"], capture_output=True, text=True
        )
        pids = [int(p) for p in lab.stdout.split() if int(p) != proc.pid]
        environ = [Path(f"/proc/{p}/environ").read_bytes().split(b"\0") for p in pids]
        assert any(f"STRUCTATTN_DATA={data}".encode() in e for e in environ)
        # widget state is saved with the notebook, so a reopened notebook finds its models
        plugin = "@jupyter-widgets/jupyterlab-manager:plugin"
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/lab/api/settings/{plugin}?token=t"
        ) as r:
            settings = json.load(r)
        assert settings["schema"]["properties"]["saveState"]["default"] is True
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
