"""A real Prometheus server on 127.0.0.1 for the server-mode tests and benchmark.

`LocalPrometheus.start(tmp, exporter)` writes a config that scrapes every host of a
`FleetExporter` (one target per host, `__metrics_path__` set per target, `instance` named after
the host) and keeps its TSDB in tmp.
"""

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.sshd import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
MISSING = None if Path(PROMETHEUS).exists() else "needs the Prometheus server binary: apt-get install prometheus"


def scrape_config(address: str, paths: list[str], interval_s: float, timeout_s: float) -> str:
    """Prometheus YAML (JSON is YAML) scraping each path at `address` as its own target."""
    targets = [
        {"targets": [address], "labels": {"__metrics_path__": path, "instance": f"sim-host-{i}"}}
        for i, path in enumerate(paths)
    ]
    return json.dumps(
        {
            "global": {
                "scrape_interval": f"{interval_s:g}s",
                "scrape_timeout": f"{timeout_s:g}s",
                "evaluation_interval": f"{interval_s:g}s",
            },
            "scrape_configs": [{"job_name": "neuron-monitor", "static_configs": targets}],
        },
        indent=1,
    )


@dataclass
class LocalPrometheus:
    proc: subprocess.Popen
    url: str
    dir: Path

    @classmethod
    def start(
        cls, tmp: Path, address: str, paths: list[str], interval_s: float = 1.0, timeout_s: float | None = None
    ) -> "LocalPrometheus":
        tmp.mkdir(parents=True, exist_ok=True)
        config = tmp / "prometheus.yml"
        config.write_text(scrape_config(address, paths, interval_s, timeout_s or min(interval_s, 10.0)))
        port = free_port()
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "prometheus.log", "wb"),
        )
        server = cls(proc, f"http://127.0.0.1:{port}", tmp)
        deadline = time.monotonic() + 120  # bounds a broken server only: a loaded machine starts it slowly
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return server
            except OSError:
                time.sleep(0.1)
        server.stop()
        raise RuntimeError("prometheus not ready within 120 s")

    def query(self, promql: str) -> list[dict]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)["data"]["result"]

    def wait_for(self, promql: str, value: float, timeout_s: float) -> None:
        """Wait until the single-valued `promql` equals `value` (e.g. all targets scraped). A
        query that times out (a server busy with its first scrapes of 1,152 targets on a loaded
        machine) is asked again until the deadline, not taken as the answer."""
        deadline = time.monotonic() + timeout_s
        seen: float | str | None = None
        while time.monotonic() < deadline:
            try:
                result = self.query(promql)
            except TimeoutError:
                seen = "no answer within 10 s"
                continue
            seen = float(result[0]["value"][1]) if result else None
            if seen == value:
                return
            time.sleep(0.2)
        raise AssertionError(f"{promql} is {seen}, not {value}, after {timeout_s} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
