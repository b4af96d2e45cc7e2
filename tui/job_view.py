"""Job scope: the verdict for on-call first, then throughput, collectives and where ranks live.

Every figure here comes from job telemetry (`JobLedger`), the only source of step times, tokens
and collective latency: neuron-monitor reports nothing about them. Without job telemetry the
view says which source is missing and shows no job figure at all, never a zero.
"""

from rich.cells import cell_len
from rich.text import Text

from trnwatch.ledger import Percentiles, units
from trnwatch.tui.job_model import JobModel, job_model, selected_suspect
from trnwatch.tui.scope import Frame, ScopeView, Screenful, Selection, column, outside, styled, wrapped
from trnwatch.tui.text import clean

JOB_SOURCE_HINT = (
    "no job telemetry: start with --job-dir DIR (the run's trnwatch.job/1 rank files) or --job-log FILE (an NxD log)"
)
VERDICT_ROLE = {
    "steady": "ok",
    "finished": "ok",
    "starting": "warn",
    "compiling": "warn",
    "checkpointing": "warn",
    "no-data": "dim",
    "slow": "warn",
    "late": "bad",
    "stalled": "bad",
    "dead": "bad",
    "failed": "bad",
    "aborted": "bad",
}
STACKS_SHOWN = 6  # ranks whose latest stack the job view shows
# Verdicts under which the job is not stepping: throughput is history, said as such.
NOT_STEPPING = ("late", "stalled", "dead", "failed", "aborted")


# Reasons, evidence, errors and warnings are wrapped onto further lines, never cut at the
# screen's edge; an outside string is bounded here only so that a runaway line cannot fill the view.
REASON_CHARS = 400
OUTSIDE_COLUMN = 48  # cells of a host or region shown in the ranks table


def summary_room(frame: Frame) -> int:
    """Cells for a line of the summary (inside its left padding)."""
    return frame.width - 1


def detail_room(frame: Frame) -> int:
    """Cells for a line of the detail (inside its left padding and scroll bar)."""
    return frame.width - 2


def _percentiles(values: Percentiles | None, unit=units.latency) -> str:
    if values is None or all(v is None for _, v in values):
        return units.NA
    return " ".join(f"{k} {unit(v)}" for k, v in values)


def _where(suspect) -> str:
    chip = "?" if suspect.chip is None else suspect.chip
    core = "?" if suspect.core is None else suspect.core
    return f" chip {chip} core {core}"


class JobView(ScopeView):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model: JobModel | None = None

    def step_suspect(self, sel: Selection, delta: int) -> None:
        """Select the previous / next suspect, as drawn (wrapping around)."""
        suspects = self.model.diagnosis.suspects if self.model is not None else ()
        if not suspects:
            return
        ranks = [s.rank for s in suspects]
        here = ranks.index(sel.rank) if sel.rank in ranks else 0
        sel.rank = ranks[(here + delta) % len(ranks)]

    def lines(self, frame: Frame) -> Screenful:
        pal = frame.palette
        if frame.job is None:
            self.model = None
            runtimes = sum(len(h.runtimes) for h in frame.ledger.hosts.values())
            return Screenful(
                styled(("JOB ", pal["scope"]), ("not connected", pal["warn"])),
                [
                    styled(
                        (
                            f"no job telemetry yet: no line from {clean(', '.join(frame.job_sources))} so far"
                            if frame.job_sources
                            else JOB_SOURCE_HINT,
                            pal["warn"],
                        )
                    ),
                    styled(
                        (
                            "Step rate, tokens/s, step-time percentiles and collective latency come only from the job; "
                            "none is shown.",
                            pal["dim"],
                        )
                    ),
                    styled(
                        (
                            f"neuron-monitor sees {runtimes} Neuron process(es) on {len(frame.ledger.hosts)} host(s): "
                            "see the host view (h).",
                            pal["dim"],
                        )
                    ),
                ],
                [],
            )
        m = self.model = job_model(frame.job, frame.read)
        return Screenful(self._subject(m, frame), self._summary(m, frame), self._detail(m, frame))

    def _subject(self, m: JobModel, frame: Frame) -> Text:
        pal = frame.palette
        ranks = m.summary.ranks
        return styled(
            ("JOB ", pal["scope"]),
            outside(m.summary.run or "?", 24, pal["title"]),
            (f" · {units.plural(ranks.seen, 'rank')} on {units.plural(ranks.hosts, 'host')}", pal["text"]),
        )

    def _summary(self, m: JobModel, frame: Frame) -> list[Text]:
        pal = frame.palette
        s = m.summary
        d = m.diagnosis
        ranks = s.ranks
        world = f" (world size {ranks.world_size})" if ranks.world_size else ""
        out = [
            styled(
                ("Job ", pal["label"]),
                outside(s.run or "?", 32, pal["title"]),
                (f"  {units.plural(ranks.seen, 'rank')}{world} on {units.plural(ranks.hosts, 'host')}", pal["text"]),
            ),
        ]
        role = pal[VERDICT_ROLE.get(d.verdict, "text")]
        if d.suspects:  # the culprit on a line of its own, so 80 columns always show it
            first = d.suspects[0]
            out.append(
                styled(
                    (d.verdict.upper(), role),
                    (f"  rank {first.rank} ", pal["bad"]),
                    outside(first.host or "?", 24, pal["text"]),
                    (_where(first), pal["text"]),
                )
            )
            out += wrapped(styled(outside(d.reason, REASON_CHARS, pal["text"])), summary_room(frame))
        else:
            out += wrapped(
                styled((d.verdict.upper(), role), ("  ", None), outside(d.reason, REASON_CHARS, pal["text"])),
                summary_room(frame),
            )
        t = s.throughput
        if t is None:
            out.append(styled(("throughput n/a: no steady step yet", pal["dim"])))
        else:
            p50 = t.step_time_s.p50
            tokens = "tokens/s n/a" if t.tokens_per_s is None else f"{t.tokens_per_s:,.0f} tokens/s"
            if d.verdict in NOT_STEPPING:
                out.append(
                    styled(
                        ("last steady ", pal["dim"]),
                        (tokens, pal["dim"]),
                        (f", {units.age(t.last_step_age_s)} ago", pal["warn"]),
                        (f"  (steps {t.first_step}-{t.last_step}, rank {t.from_rank})", pal["dim"]),
                    )
                )
            else:
                rate = f"{1 / p50:.2f} steps/s" if p50 else "steps/s n/a"
                out.append(
                    styled(
                        (tokens, pal["text"]),
                        ("  ", None),
                        (rate, pal["text"]),
                        (
                            f"  (rank {t.from_rank}, steady steps {t.first_step}-{t.last_step}, {t.boundary})",
                            pal["dim"],
                        ),
                    )
                )
            out.append(styled(("step time ", pal["label"]), (_percentiles(t.step_time_s), pal["text"])))
        if m.collectives:
            worst = max(m.collectives, key=lambda c: c.latency_s.p99 or 0.0)
            more = f"  (slowest of {len(m.collectives)} ops)" if len(m.collectives) > 1 else ""
            out.append(
                styled(
                    outside(worst.op, 20, pal["label"]),
                    (" latency ", pal["label"]),
                    (_percentiles(worst.latency_s), pal["text"]),
                    (more, pal["dim"]),
                )
            )
        else:
            out.append(
                styled(
                    (
                        "collective latency unavailable: no collective timings in the telemetry "
                        "(needs the in-job emitter)",
                        pal["dim"],
                    )
                )
            )
        return out

    def _detail(self, m: JobModel, frame: Frame) -> list[Text]:
        pal = frame.palette
        s = m.summary
        title = pal["title"]
        ranks = s.ranks
        unknown = f" · {ranks.unknown} never heard from" if ranks.unknown else ""
        out: list[Text] = [
            styled(
                (
                    f"ranks: {ranks.running} running · {ranks.finished} finished · "
                    f"{ranks.failed} failed · {ranks.dead} dead{unknown}",
                    pal["dim"],
                )
            )
        ]
        if m.diagnosis.suspects:
            out += [
                Text(),
                styled(("Ranks to look at", title), ("  [ ] select · k its stack · K with native frames", pal["dim"])),
            ]
            chosen = selected_suspect(m.diagnosis.suspects, frame.selection.rank)
            for sus in m.diagnosis.suspects:
                out.append(
                    styled(
                        ("▸ " if sus is chosen else "  ", pal["title"]),
                        (f"rank {sus.rank:<6}", pal["bad"]),
                        outside(sus.host or "?", 28, pal["text"]),
                        (_where(sus), pal["text"]),
                    )
                )
                ev = sus.evidence
                evidence = ""
                if ev.chip_util_pct is not None or ev.peer_chip_util_median_pct is not None:
                    evidence = (
                        f"; chip util {units.pct(ev.chip_util_pct)} vs peers' median "
                        f"{units.pct(ev.peer_chip_util_median_pct)}"
                    )
                room = detail_room(frame)
                out += wrapped(
                    styled("    ", outside(ev.why, REASON_CHARS, pal["warn"]), (evidence, pal["dim"])), room, 6
                )
                if ev.error:
                    out += wrapped(
                        styled(("    error ", pal["label"]), outside(ev.error, REASON_CHARS, pal["bad"])), room, 6
                    )
                if ev.last_warning:
                    out += wrapped(
                        styled(
                            (f"    warnings {ev.warnings}, latest ", pal["label"]),
                            outside(ev.last_warning, REASON_CHARS, pal["warn"]),
                        ),
                        room,
                        6,
                    )
        out += stack_lines(frame)

        model = s.model
        par = s.parallel
        out += [Text(), styled(("Run", title))]
        out.append(
            styled(
                ("  model ", pal["label"]),
                outside(model.name if model else "n/a", 32, pal["text"]),
                (f"  {model.params:,} parameters" if model else "", pal["text"]),
                ("  ", None),
                outside(s.precision or "precision n/a", 12, pal["text"]),
            )
        )
        out.append(
            styled(
                ("  batch ", pal["label"]),
                (
                    f"global {s.global_batch}, micro {s.micro_batch}, sequence {s.seq_len}"
                    if s.global_batch
                    else "n/a",
                    pal["text"],
                ),
            )
        )
        out.append(
            styled(
                ("  parallel ", pal["label"]),
                (f"TP {par.tp} PP {par.pp} DP {par.dp}" if par else "n/a", pal["text"]),
                (f"  LNC {s.lnc}" if s.lnc else "", pal["text"]),
                ("  backend ", pal["label"]),
                outside(s.backend or "n/a", 8, pal["text"]),
            )
        )
        compile_s = s.cold_compile_s
        out.append(
            styled(
                ("  cold compile ", pal["label"]),
                (units.NA if compile_s is None else f"{compile_s:.0f} s ({s.cold_compiles}x)", pal["text"]),
                (f", {s.compile_cache_hits} cache hits", pal["dim"]),
            )
        )
        saves = s.checkpoint_saves
        out.append(
            styled(
                ("  checkpoint saves ", pal["label"]),
                (f"{saves.count}", pal["text"]),
                (f"  save time {_percentiles(saves.save_s)}" if saves.count else "", pal["text"]),
            )
        )
        th = s.thresholds
        out.append(
            styled(
                ("  late after ", pal["label"]),
                (f"{th.late_s:.0f} s", pal["text"]),
                ("  stalled after ", pal["label"]),
                (f"{th.stall_s:.0f} s", pal["text"]),
                ("  dead after ", pal["label"]),
                (f"{th.dead_after_s:.0f} s", pal["text"]),
            )
        )

        if m.collectives:
            out += [Text(), styled(("Collectives", title), (" (recent window, all ranks)", pal["dim"]))]
            for c in m.collectives:
                out.append(
                    styled(
                        ("  ", None),
                        column(c.op, 14, pal["label"]),
                        (f"{c.count:>7} calls ", pal["text"]),
                        (f"{units.size(c.bytes):>10}  ", pal["dim"]),
                        (_percentiles(c.latency_s), pal["text"]),
                    )
                )

        # Hosts and regions whole (to OUTSIDE_COLUMN cells): a row wider than the screen scrolls sideways.
        host_w = 1 + max((cell_len(clean(r.host or "?")) for r in m.ranks), default=4)
        host_w = min(max(host_w, 5), OUTSIDE_COLUMN + 1)
        rows = []
        for r in m.ranks:
            status_style = pal["bad"] if r.dead or r.status in ("failed", "aborted") else pal["text"]
            heartbeat = "none" if r.heartbeat_age_s is None else units.age(r.heartbeat_age_s) + " ago"
            known = r.host is not None and frame.ledger.host_named(r.host) is not None
            rows.append(
                styled(
                    (f"  {r.rank:<6}", pal["label"]),
                    column(r.host or "?", host_w, pal["text"] if known else pal["dim"]),
                    (f"{'?' if r.chip is None else r.chip:>4}{'?' if r.core is None else r.core:>5}  ", pal["text"]),
                    (f"{'dead' if r.dead else r.status:<8}", status_style),
                    (f"{'-' if r.last_step is None else r.last_step:>7}{heartbeat:>11}  ", pal["text"]),
                    outside(r.region or "", OUTSIDE_COLUMN, pal["dim"]),
                )
            )
        sideways = (
            "; ← → scroll sideways" if max((row.cell_len for row in rows), default=0) > detail_room(frame) else ""
        )
        out += [
            Text(),
            styled(("Ranks", title), (f" (where they run, as the job reports it{sideways})", pal["dim"])),
            styled(
                (
                    f"  {'rank':<6}{'host':<{host_w}}{'chip':>4}{'core':>5}  {'status':<8}{'step':>7}"
                    f"{'heartbeat':>11}  region",
                    pal["dim"],
                )
            ),
            *rows,
        ]
        return out


def stack_lines(frame: Frame) -> list[Text]:
    """The latest stack capture of each rank (newest first, STACKS_SHOWN of them), every thread
    and frame as py-spy printed it, innermost first; a failure in its own words. Shown as data."""
    pal = frame.palette
    captures = frame.ledger.stacks.latest_by_rank()[:STACKS_SHOWN]
    pending = sorted(frame.stacks_pending)
    if not captures and not pending:
        return []
    out = [Text(), styled(("Stacks", pal["title"]), (" (py-spy dump, innermost frame first)", pal["dim"]))]
    if pending:
        out.append(styled((f"  taking the stack of rank {', '.join(map(str, pending))}…", pal["warn"])))
    for c in captures:
        why = "stall, for contrast" if c.contrast else c.trigger
        out.append(
            styled(
                (f"  rank {c.rank:<6}", pal["label"]),
                outside(c.host or "?", 28, pal["text"]),
                (f"  pid {c.pid if c.pid is not None else '?'}  {units.clock_utc(c.started)}  ", pal["text"]),
                (f"{c.seconds:.1f} s  ({why}{', native' if c.native else ''})", pal["dim"]),
            )
        )
        role = pal["ok"] if c.outcome == "ok" else pal["bad"]
        out.append(styled(("    ", None), (c.outcome, role), (": ", role), outside(c.message, 200, role)))
        for thread in c.threads:
            out.append(
                styled(
                    ("    Thread ", pal["label"]),
                    outside(thread.thread, 20, pal["text"]),
                    (" ", None),
                    outside(thread.state or "", 12, pal["dim"]),
                    (" ", None),
                    outside(thread.name or "", 40, pal["text"]),
                )
            )
            for f in thread.frames:
                where = f.file if f.line is None else f"{f.file}:{f.line}"
                out.append(
                    styled(
                        ("      ", None),
                        outside(f.function, 60, pal["warn"]),
                        ("  ", None),
                        outside(where, 80, pal["dim"]),
                    )
                )
        if c.text_truncated:
            out.append(styled(("    (py-spy printed more: cut at the kept size)", pal["dim"])))
        for path in c.dump_files:
            out.append(styled(("    dump in the run directory: ", pal["label"]), outside(path, 100, pal["text"])))
    return out
