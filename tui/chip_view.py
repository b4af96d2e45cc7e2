"""Chip scope: one chip in full: cores, HBM by category, latency, counters, models, history.

Every figure is the chip's own (boundary: one chip of one host). A figure the reports did not
carry is "n/a"; an idle core (neuron-monitor omits it from `neuroncores_in_use`) is 0% only when
the report did carry core counters.
"""

from rich.style import Style
from rich.text import Text

from trnwatch.ledger import HBM_TREND_MIN_SAMPLES, HBM_TREND_WINDOW_S, hbm_high, trend_text, units
from trnwatch.tui.chip_model import ChipModel, chip_model
from trnwatch.tui.scope import Frame, ScopeView, Screenful, outside, styled
from trnwatch.tui.widgets import shown_range, sparkline, util_glyph

BAR_COLS = 24
LATENCY_KEYS = ("p0", "p50", "p99", "p100")


def _hbm_range_text(low: float, high: float, capacity: int | None) -> str:
    """The sparkline's scale, "85.0-92.3% of 144.00 GiB" (GiB without a capacity)."""
    if capacity:
        return f"{100 * low / capacity:.1f}-{100 * high / capacity:.1f}% of {units.gib(capacity)}"
    return f"{units.gib(int(low))}-{units.gib(int(high))}"


def _bar(share: float, cols: int) -> str:
    """A single-style horizontal bar: `share` (0..1) of `cols` cells filled."""
    filled = max(0, min(cols, round(share * cols)))
    return "█" * filled + "░" * (cols - filled)


class ChipView(ScopeView):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model: ChipModel | None = None

    def lines(self, frame: Frame) -> Screenful:
        sel = frame.selection
        pal = frame.palette
        m = chip_model(frame.read, sel.host_id, sel.chip) if sel.host_id else None
        self.model = m
        if m is None:
            return Screenful(
                styled(("CHIP", pal["scope"])),
                [styled(("No chip selected: pick one in the UltraServer view (u) or jump with /.", pal["warn"]))],
                [],
            )
        subject = styled(
            ("CHIP ", pal["scope"]),
            (f"{m.host.number}/{m.cell.index} ", pal["title"]),
            ("· 1 chip of host ", pal["text"]),
            outside(m.host.name or m.host.host_id, 28, pal["text"]),
        )
        summary, detail = self._summary(m, frame), self._detail(m, frame)
        if m.host.state != "fresh":  # a stale or lost host's figures are history: dimmed, as the host view says
            for line in summary[:-1] + detail:
                line.stylize(Style(dim=True))
        return Screenful(subject, summary, detail)

    def _summary(self, m: ChipModel, frame: Frame) -> list[Text]:
        pal = frame.palette
        c = m.cell
        state = m.host.state
        fresh = state == "fresh"
        freshness = (
            f"host {state}, last report {units.age(m.host.age_s)} ago"
            if fresh
            else f"{state.upper()} host: last report {units.age(m.host.age_s)} ago; these are its last figures",
            pal["dim"] if fresh else (pal["bad"] if state == "lost" else pal["warn"]),
        )
        ecc_style = pal["bad"] if c.ecc_events else pal["text"]
        full = hbm_high(c.hbm_pct)
        return [
            styled(
                ("Chip ", pal["label"]),
                (f"{c.index}", pal["title"]),
                (" of host ", pal["label"]),
                (f"{m.host.number} ", pal["title"]),
                outside(m.host.name or "", 28, pal["text"]),
                " ",
                outside(m.host.host_id, 24, pal["dim"]),
            ),
            styled(
                ("util ", pal["label"]),
                (units.pct(c.util_pct), pal["text"]),
                (f" (mean {units.pct(m.util_mean_pct)}, max {units.pct(m.util_max_pct)})", pal["dim"]),
                ("  HBM ", pal["label"]),
                (units.used_of(c.hbm_bytes, c.hbm_capacity_bytes), pal["hbm-full"] if full else pal["text"]),
            ),
            styled(
                ("ECC events ", pal["label"]),
                (f"{c.ecc_events}" + ("?" if c.ecc_undecided else ""), ecc_style),
                (f" ({c.ecc_uncorrected} UNCORRECTED)" if c.ecc_uncorrected else "", pal["bad"] + Style(reverse=True)),
                (" HW ERROR (kernel log)" if c.hw_errors else "", pal["bad"] + Style(reverse=True)),
                ("  ", None),
                freshness,
            ),
        ]

    def _detail(self, m: ChipModel, frame: Frame) -> list[Text]:
        pal = frame.palette
        out: list[Text] = []
        title = pal["title"]

        out.append(styled(("NeuronCores", title), (" (logical; index global on the host)", pal["dim"])))
        if not m.cores:
            out.append(styled(("  core topology not reported", pal["dim"])))
        for core in m.cores:
            state = core.state
            physical = (
                "  ".join(f"{name} {pct:.1f}%" for name, pct in sorted(state.physical_util_pct.items()))
                if state
                else ""
            )
            out.append(
                styled(
                    (f"  core {core.index:<3} ", pal["label"]),
                    (
                        util_glyph(core.util_pct) + " ",
                        pal.heat[units.level(core.util_pct or 0.0, 100.0, len(pal.heat))],
                    ),
                    (f"{units.pct(core.util_pct):>6}", pal["text"]),
                    (
                        f"  {units.flops(state.flops):>14}" if state else "  idle (not listed)",
                        pal["text"] if state else pal["dim"],
                    ),
                    (f"  {physical}" if physical else "", pal["dim"]),
                )
            )

        out += [Text(), styled(("HBM by category", title), (" against the chip's capacity", pal["dim"]))]
        capacity = m.cell.hbm_capacity_bytes
        if not m.hbm_by_category:
            out.append(styled(("  no memory breakdown reported", pal["dim"])))
        for name, n_bytes in m.hbm_by_category:
            share = n_bytes / capacity if capacity else 0.0
            out.append(
                styled(
                    (f"  {outside(name, 12)[0]:<12} ", pal["label"]),
                    (_bar(share, BAR_COLS) if capacity else "", pal.hbm[4]),
                    (f" {units.gib(n_bytes):>10}", pal["text"]),
                    (f" {units.pct(share * 100) if capacity else 'capacity unknown':>7}", pal["dim"]),
                )
            )
        out.append(
            styled(
                (f"  {'total':<12} ", pal["label"]),
                (units.used_of(m.cell.hbm_bytes, capacity), pal["text"]),
                (f"  peak {units.gib(m.hbm_peak_bytes)}", pal["dim"]),
            )
        )

        period_s = m.period_s or 1.0
        cols = max(10, min(60, frame.width - 24))
        out += [
            Text(),
            styled(("History", title), (f" (last {cols} reports, newest right; blank = report missing)", pal["dim"])),
        ]
        util_hist = [(t, u) for t, u, _ in m.history]
        hbm_hist = [(t, None if b is None else float(b)) for t, _, b in m.history]
        out.append(
            styled(
                ("  util ", pal["label"]),
                (sparkline(util_hist, frame.now_s, period_s, cols, 100.0), pal.heat[5]),
                ("  0-100%", pal["dim"]),
            )
        )
        hbm_range = shown_range(hbm_hist, frame.now_s, period_s, cols)
        if hbm_range is None:
            out.append(
                styled(
                    ("  HBM  ", pal["label"]),
                    (sparkline(hbm_hist, frame.now_s, period_s, cols, 0.0), pal.hbm[5]),
                    ("  n/a", pal["dim"]),
                )
            )
        else:
            # Scaled to what it shows, so 85 -> 92% is a climb, not a flat line; the range says so.
            low, high = hbm_range
            out.append(
                styled(
                    ("  HBM  ", pal["label"]),
                    (sparkline(hbm_hist, frame.now_s, period_s, cols, high, low), pal.hbm[5]),
                    (f"  {_hbm_range_text(low, high, capacity)}", pal["dim"]),
                )
            )
        trend = m.hbm_trend
        leaking = any(
            f.kind == "hbm-leak" and (f.site.host_id, f.site.chip) == (m.host.host_id, m.cell.index)
            for f in frame.findings
        )
        out.append(
            styled(
                ("  HBM trend ", pal["label"]),
                (
                    trend_text(trend)
                    if trend
                    else f"n/a (fewer than {HBM_TREND_MIN_SAMPLES} reports in {HBM_TREND_WINDOW_S:.0f} s)",
                    pal["bad"] if leaking else pal["text"],
                ),
                ("  LEAK: rising steadily while its peers stay flat" if leaking else "", pal["bad"]),
            )
        )

        out += [Text(), styled(("Execution latency", title), (" (total, latest percentiles per runtime)", pal["dim"]))]
        if not m.latency_s:
            out.append(styled(("  n/a: no execution latency reported", pal["dim"])))
        for tag, percentiles in m.latency_s:
            values = dict(percentiles)
            shown = "  ".join(f"{k} {units.latency(values.get(k))}" for k in LATENCY_KEYS if k in values)
            out.append(styled("  ", outside(tag, 28, pal["label"]), ("  " + shown, pal["text"])))

        out += [
            Text(),
            styled(("Errors and ECC", title), (f" (window totals; ECC reading {m.ecc_reading})", pal["dim"])),
        ]
        ecc = "  ".join(f"{name.replace('_ecc_', ' ')} {'?' if v is None else v}" for name, v in m.ecc_totals)
        out.append(
            styled(
                ("  ECC ", pal["label"]), (ecc or "n/a: not reported", pal["bad"] if m.cell.ecc_events else pal["text"])
            )
        )
        errors = "  ".join(
            f"{name.split('.', 1)[1]} {'?' if v is None else v}" for name, v in m.execution_errors if v != 0
        )
        out.append(
            styled(
                ("  executions ", pal["label"]),
                (
                    errors or ("no errors" if m.execution_errors else "n/a: not reported"),
                    pal["bad"] if errors else pal["text"],
                ),
            )
        )

        out += [Text(), styled(("Neuron processes on this chip", title))]
        if not m.runtimes:
            out.append(styled(("  none", pal["dim"])))
        for rt in m.runtimes:
            out.append(
                styled(
                    (f"  pid {'n/a' if rt.pid is None else rt.pid:<8} ", pal["label"]),
                    outside(rt.tag, 32, pal["text"]),
                    (f"  cores {','.join(map(str, rt.cores)) or '-'}", pal["dim"]),
                    ("" if rt.running else "  (gone)", pal["warn"]),
                    ("  error: " if rt.error else "", pal["bad"]),
                    outside(rt.error, 40, pal["bad"]),
                )
            )

        out += [Text(), styled(("Loaded models", title))]
        if not m.models:
            out.append(styled(("  none", pal["dim"])))
        for name, loaded, running in m.models:
            out.append(styled("  ", outside(name, 56, pal["text"]), (f"  ×{loaded}, {running} running", pal["dim"])))
        return out
