"""Incidents: every finding, kept for the whole session, with where, when and how it changed.

A finding (ledger/findings.py) is what is wrong *now*; an incident is its story: opened when a
finding first appears at a site, escalated when its label worsens at the same site (LATE ->
STALLED), eased when it improves, cleared once the finding has been absent for `CLEAR_AFTER_S`
(so a finding that flickers around a threshold is one incident, not many). A job finding is
never cleared while the job's verdict is a pause (checkpointing, compiling, starting): a pause neither
confirms nor refutes it, so the straggler's SLOW does not blink off during a checkpoint.

The identity of an incident is its kind and its site key: one job incident at a time (the suspect
may change as the diagnosis sharpens), one per chip for chip findings, per host for host
findings, per source for source findings. The session updates the log once per period at its
own "now" (passed in: nothing here reads the clock); the screen's fault line, the receipt's
`incidents[]`, the snapshot, the alerts and the metrics endpoint all read the same `Incident`
objects. The log keeps at most `MAX_INCIDENTS`; past that the oldest cleared one is dropped
(or, with every kept incident open, the new one), and `dropped` counts them.
"""

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from trnwatch.collectors.stack_records import StackCapture
from trnwatch.ledger.findings import SEVERITIES, Finding, Severity, finding_order, finding_text, kind_title

MAX_INCIDENTS = 2000
MAX_CHANGES = 32  # per incident: the first and the latest are kept, the middle ones dropped and counted
CLEAR_AFTER_S = 10.0
STACK_LEAD_S = 2.0  # a stack capture this long before a job incident's first sighting is its evidence
# Job verdicts during which a job finding is held open (neither confirmed nor refuted).
PAUSE_VERDICTS = ("checkpointing", "compiling", "starting")
# Order of a job finding's labels, mildest first: a move right is an escalation.
JOB_LABEL_ORDER = ("SLOW", "LATE", "STALLED", "HUNG", "DEAD", "FAILED")

Change = Literal["opened", "escalated", "eased", "cleared"]
State = Literal["open", "cleared"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IncidentSite(_Frozen):
    """Where: as much as is known. `instance_id` is the ledger's host id (the receipt's chip and
    host rows are keyed by it); `host` is the name people use (instance name, stream label)."""

    rank: int | None = None
    pid: int | None = None  # the rank's process, when known
    host: str | None = None
    instance_id: str | None = None
    ultraserver: str | None = None
    chip: int | None = None
    core: int | None = None
    region: str | None = None
    step: int | None = None
    source: str | None = None


class IncidentEvidence(_Frozen):
    """What was seen, as of the incident's latest sighting."""

    text: str  # one line, culprit first: "STALLED rank 120 sim-us-07/2 core 8 dataloader · 575 ranks in ..."
    what: str  # the story without the site
    hbm_rate_bytes_per_s: float | None = None  # hbm-leak
    hbm_time_to_full_s: float | None = None
    # Ranks' Python stacks taken while this (job) incident was open (`with_stacks`), oldest first.
    stacks: list[StackCapture] = []


class IncidentChange(_Frozen):
    at: float  # unix s, the session's clock
    change: Change
    label: str
    severity: Severity


class Incident(_Frozen):
    id: int  # 1, 2, ... in opening order, unique in the session
    kind: str  # the finding's kind (findings.KIND_ORDER)
    title: str  # for people: "uncorrected ECC", "job stalled"
    label: str  # latest: STALLED, ECC, LEAK, LOST, ...
    severity: Severity  # latest
    worst_severity: Severity
    state: State
    first: float  # unix s: first seen
    last: float  # unix s: last seen
    cleared: float | None  # unix s: when it was judged gone (null while open)
    site: IncidentSite
    evidence: IncidentEvidence
    changes: list[IncidentChange]  # opened first; escalations, easings, the clearing
    changes_dropped: int = 0


def _site(f: Finding) -> IncidentSite:
    s = f.site
    return IncidentSite(
        rank=s.rank,
        pid=s.pid,
        host=s.host,
        instance_id=s.host_id,
        ultraserver=s.ultraserver,
        chip=s.chip,
        core=s.core,
        region=s.region,
        step=s.step,
        source=s.source_id,
    )


def _evidence(f: Finding) -> IncidentEvidence:
    trend = f.trend
    return IncidentEvidence(
        text=finding_text(f),
        what=f.what,
        hbm_rate_bytes_per_s=None if trend is None else round(trend.rate_bytes_per_s, 1),
        hbm_time_to_full_s=None if trend is None or trend.time_to_full_s is None else round(trend.time_to_full_s, 1),
    )


def incident_key(f: Finding) -> tuple:
    """The identity of the incident a finding belongs to (see the module docstring)."""
    s = f.site
    if f.scope == "job":
        return (f.kind,)
    if f.scope == "chip":
        return (f.kind, s.host_id or s.host, s.chip)
    if f.scope == "host":
        return (f.kind, s.host_id or s.host)
    return (f.kind, s.source_id)


def _worse(a: Severity, b: Severity) -> bool:
    return SEVERITIES.index(a) < SEVERITIES.index(b)  # SEVERITIES: most severe first


def _label_rank(f: Finding) -> tuple[int, int]:
    """Worse is larger: by severity, then (job findings) by JOB_LABEL_ORDER."""
    label = JOB_LABEL_ORDER.index(f.label) if f.label in JOB_LABEL_ORDER else 0
    return -SEVERITIES.index(f.severity), label


@dataclass(slots=True)
class _Track:
    """One incident while the log folds findings into it (mutable; `Incident` is its frozen face)."""

    id: int
    finding: Finding  # the latest sighting
    first_s: float
    last_s: float
    worst: Severity
    changes: list[IncidentChange] = field(default_factory=list)
    changes_dropped: int = 0
    cleared_s: float | None = None
    frozen: Incident | None = None  # built on demand, until the track changes

    def note(self, change: IncidentChange) -> None:
        if len(self.changes) >= MAX_CHANGES:
            del self.changes[1]  # keep the opening
            self.changes_dropped += 1
        self.changes.append(change)
        self.frozen = None

    def incident(self) -> Incident:
        if self.frozen is None:
            f = self.finding
            self.frozen = Incident(
                id=self.id,
                kind=f.kind,
                title=kind_title(f),
                label=f.label,
                severity=f.severity,
                worst_severity=self.worst,
                state="open" if self.cleared_s is None else "cleared",
                first=self.first_s,
                last=self.last_s,
                cleared=self.cleared_s,
                site=_site(f),
                evidence=_evidence(f),
                changes=list(self.changes),
                changes_dropped=self.changes_dropped,
            )
        return self.frozen


class IncidentLog:
    """Every incident of a session; `update` once per period with the findings at `now_s`."""

    def __init__(self, max_incidents: int = MAX_INCIDENTS, clear_after_s: float = CLEAR_AFTER_S):
        self.max_incidents = max_incidents
        self.clear_after_s = clear_after_s
        self._tracks: dict[int, _Track] = {}  # by id, in opening order
        self._open: dict[tuple, _Track] = {}  # by incident key
        self._next_id = 1
        self.dropped = 0
        self.updated_s: float | None = None

    def update(self, findings: Iterable[Finding], now_s: float, job_verdict: str | None = None) -> list[Incident]:
        """Fold the findings seen at `now_s`; return the incidents that opened, escalated, eased or
        cleared in this update (their latest change says which), in the findings' order."""
        self.updated_s = now_s
        changed: list[Incident] = []
        seen: set[tuple] = set()
        for f in findings:
            key = incident_key(f)
            if key in seen:
                continue  # one finding per site and kind in one update
            seen.add(key)
            track = self._open.get(key)
            if track is None:
                track = self._open_track(key, f, now_s)
                if track is not None:
                    changed.append(track.incident())
                continue
            before, after = _label_rank(track.finding), _label_rank(f)
            track.finding, track.last_s, track.frozen = f, now_s, None
            if after != before:
                change: Change = "escalated" if after > before else "eased"
                track.note(IncidentChange(at=now_s, change=change, label=f.label, severity=f.severity))
                if _worse(f.severity, track.worst):
                    track.worst = f.severity
                changed.append(track.incident())
        held = job_verdict in PAUSE_VERDICTS
        for key, track in list(self._open.items()):
            if key in seen or now_s - track.last_s < self.clear_after_s:
                continue
            if held and track.finding.scope == "job":
                continue
            track.cleared_s = now_s
            last = track.finding
            track.note(IncidentChange(at=now_s, change="cleared", label=last.label, severity=last.severity))
            del self._open[key]
            changed.append(track.incident())
        return changed

    def _open_track(self, key: tuple, f: Finding, now_s: float) -> _Track | None:
        if len(self._tracks) >= self.max_incidents:
            oldest_cleared = next((i for i, t in self._tracks.items() if t.cleared_s is not None), None)
            if oldest_cleared is None:
                self.dropped += 1
                return None
            del self._tracks[oldest_cleared]
            self.dropped += 1
        track = _Track(self._next_id, f, now_s, now_s, f.severity)
        track.note(IncidentChange(at=now_s, change="opened", label=f.label, severity=f.severity))
        self._next_id += 1
        self._tracks[track.id] = track
        self._open[key] = track
        return track

    def incidents(self) -> list[Incident]:
        """Every kept incident, in opening order."""
        return [t.incident() for t in self._tracks.values()]

    def open_incidents(self) -> list[Incident]:
        """The open incidents, most severe first (the findings' order)."""
        return [t.incident() for t in sorted(self._open.values(), key=lambda t: finding_order(t.finding))]

    def open_findings(self) -> list[Finding]:
        """The latest finding of each open incident, most severe first: what the fault line shows
        (a finding held through a pause or a flicker stays on it)."""
        return sorted((t.finding for t in self._open.values()), key=finding_order)


def with_stacks(incidents: list[Incident], captures: Iterable[StackCapture]) -> list[Incident]:
    """The incidents, each job incident's evidence holding the stack captures taken while it was
    open (from `STACK_LEAD_S` before its first sighting to its clearing): the suspect's stack and
    the waiting ranks' taken for contrast alike. The lead: incidents are judged once a second, and
    a replay judges at the recorded data's moments, not the live session's, so a replay may see a
    stall first up to a tick or two after the live session captured its stacks. A capture taken
    while no job incident was open (on demand, on a healthy job) belongs to none; the receipt's
    `stacks` section keeps every capture either way."""
    taken: dict[int, list[StackCapture]] = {}
    jobs = [i for i in incidents if i.kind == "job"]
    for capture in captures:
        owner = next(
            (i for i in jobs if i.first - STACK_LEAD_S <= capture.started <= (i.cleared or float("inf"))), None
        )
        if owner is not None:
            taken.setdefault(owner.id, []).append(capture)
    return [
        i
        if i.id not in taken
        else i.model_copy(update={"evidence": i.evidence.model_copy(update={"stacks": taken[i.id]})})
        for i in incidents
    ]


def worst_first(incidents: Iterable[Incident]) -> list[Incident]:
    """Incidents most severe first (worst severity reached), then open before cleared, then oldest."""
    return sorted(incidents, key=lambda i: (SEVERITIES.index(i.worst_severity), i.state != "open", i.first, i.id))


def site_words(site: IncidentSite) -> str:
    """The site as people name it: "rank 120 on sim-us-07/2 core 8", "sim-us-07/2", "job:rank-3"."""
    place = ""
    if site.host:
        place = site.host + ("" if site.chip is None else f"/{site.chip}")
    elif site.chip is not None:
        place = f"chip {site.chip}"
    elif site.source:
        place = site.source
    if site.core is not None and place:
        place += f" core {site.core}"
    if site.rank is not None:
        pid = "" if site.pid is None else f" (pid {site.pid})"
        return f"rank {site.rank}{pid}" + (f" on {place}" if place else "")
    return place or "the job"


def _hms(t_s: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t_s))


def incident_words(incident: Incident) -> str:
    """One incident for a headline: "uncorrected ECC on sim-us-07/2 at 14:24:50"."""
    return f"{incident.title} on {site_words(incident.site)} at {_hms(incident.first)}"
