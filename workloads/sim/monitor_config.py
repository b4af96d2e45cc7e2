"""The neuron-monitor JSON config file, read the way the simulator honours it.

Honoured: the root `period`, `neuron_runtimes[].period`, `neuron_runtimes[].metrics[].type/period`,
`system_metrics[].type/period` (innermost period wins; default 5 s). Group periods are rounded to
a whole number of base periods (the base period is the shortest enabled group period).
Read but not modelled: `tag_filter` (every simulated runtime is reported) and the `k8s_info`
metric; both are listed in `MonitorConfig.ignored` so the caller can say so.
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path

RUNTIME_GROUPS = ("execution_stats", "memory_used", "neuron_runtime_vcpu_usage", "neuroncore_counters")
SYSTEM_GROUPS = ("memory_info", "neuron_hw_counters", "vcpu_usage")
ALL_GROUPS = RUNTIME_GROUPS + SYSTEM_GROUPS
DEFAULT_PERIOD_S = 5.0

_DURATION_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")


class ConfigError(ValueError):
    """The config file cannot be used; the message says why."""


@dataclass(frozen=True)
class MonitorConfig:
    """Enabled metric groups with their periods, and the base report period."""

    period_s: float
    group_periods_s: dict[str, float]
    ignored: tuple[str, ...] = ()


def default_config() -> MonitorConfig:
    """What neuron-monitor does without a config file: every group, every 5 s."""
    return MonitorConfig(DEFAULT_PERIOD_S, {group: DEFAULT_PERIOD_S for group in ALL_GROUPS})


def parse_duration_s(text: str) -> float:
    """A Go-style duration ("1s", "500ms", "1m30s") in seconds; raises ConfigError."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ConfigError(f'bad duration {text!r} (expected e.g. "1s" or "500ms")')
    seconds = sum(float(number) * _DURATION_UNIT_S[unit] for number, unit in parts)
    if seconds <= 0:
        raise ConfigError(f"duration {text!r} must be positive")
    return seconds


def _period_s(obj: dict, inherited_s: float) -> float:
    return parse_duration_s(obj["period"]) if "period" in obj else inherited_s


def parse_config(doc: object) -> MonitorConfig:
    """Read a parsed config document; raises ConfigError on anything the simulator cannot honour."""
    if not isinstance(doc, dict):
        raise ConfigError("config must be a JSON object")
    try:
        root_s = _period_s(doc, DEFAULT_PERIOD_S)
        periods_s: dict[str, float] = {}
        ignored: list[str] = []

        def enable(metric: dict, known: tuple[str, ...], inherited_s: float) -> None:
            kind = metric["type"]
            if kind == "k8s_info":
                ignored.append("k8s_info")
                return
            if kind not in known:
                raise ConfigError(f"unknown metric type {kind!r}; known here: {', '.join(known)}")
            period_s = _period_s(metric, inherited_s)
            periods_s[kind] = min(period_s, periods_s.get(kind, period_s))

        for runtime in doc.get("neuron_runtimes", []):
            if "tag_filter" in runtime:
                ignored.append("tag_filter")
            runtime_s = _period_s(runtime, root_s)
            for metric in runtime.get("metrics", []):
                enable(metric, RUNTIME_GROUPS, runtime_s)
        for metric in doc.get("system_metrics", []):
            enable(metric, SYSTEM_GROUPS, root_s)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"malformed config: {exc!r}") from None
    base_s = min(periods_s.values(), default=root_s)
    return MonitorConfig(base_s, periods_s, tuple(dict.fromkeys(ignored)))


def load_config(path: str | Path) -> MonitorConfig:
    """Read a neuron-monitor config file; raises ConfigError (also for unreadable or non-JSON files)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    return parse_config(doc)
