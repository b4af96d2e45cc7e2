"""Host scope: one host's chips (4 on a Trn3 Gen2 server, 16 on Gen1 / Trn2), its CPU and
memory, and the Neuron processes on it with their tags and PIDs (boundary: one host, one
neuron-monitor stream)."""

from rich.cells import cell_len
from rich.text import Text
from textual import events

from trnwatch.ledger import units
from trnwatch.tui.host_model import HostModel, host_model
from trnwatch.tui.scope import Frame, OpenChip, ScopeView, Screenful, Selection, column, outside, styled
from trnwatch.tui.text import clean
from trnwatch.tui.widgets import TextLines, hbm_glyph, sparkline, util_glyph

SPARK_COLS = 20


def _vcpu(user_pct: float | None, system_pct: float | None) -> str:
    """User + system vCPU of a process, "8.1+1.6%"."""
    if user_pct is None or system_pct is None:
        return units.NA
    return f"{user_pct:.1f}+{system_pct:.1f}%"


def _rate(rates: dict[str, float], name: str, unit: str = "/s") -> str:
    value = rates.get(name)
    return "n/a" if value is None else f"{value:,.0f}{unit}"


def _hardware_lines(m: HostModel, frame: Frame) -> list[Text]:
    """sysfs: the host's EFA rates (the traffic between UltraServers) and each device's power
    and unhealthy components; "n/a" for a node the host does not expose."""
    pal = frame.palette
    out = [styled(("Hardware (sysfs)", pal["title"]), (" EFA carries the traffic between UltraServers", pal["dim"]))]
    rates = dict(m.efa_rates_per_s or ())
    out.append(
        styled(
            ("  EFA (between UltraServers) ", pal["label"]),
            (f"tx {units.gbps(rates.get('tx_bytes'))}  rx {units.gbps(rates.get('rx_bytes'))}", pal["text"]),
            (f"  drops {_rate(rates, 'rx_drops')}  retrans {_rate(rates, 'retrans_pkts')}", pal["text"]),
            (f"  timeouts {_rate(rates, 'retrans_timeout_events')}", pal["text"]),
            (f"  unresponsive {_rate(rates, 'unresponsive_remote_events')}", pal["text"]),
            (f"  impaired {_rate(rates, 'impaired_remote_conn_events')}", pal["text"]),
        )
    )
    for device, status, avg_pct, unhealthy in m.devices_health:
        power = "n/a" if status is None else f"{units.pct(avg_pct)} ({status})"
        out.append(
            styled(
                (f"  chip {device:<3} power ", pal["label"]),
                (power, pal["text"]),
                ("  unhealthy: ", pal["label"]),
                outside(
                    "n/a" if unhealthy is None else unhealthy or "none", 40, pal["bad"] if unhealthy else pal["text"]
                ),
            )
        )
    return out


class HostView(ScopeView):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model: HostModel | None = None
        self._chip_y: dict[int, int] = {}  # detail line -> chip index

    def lines(self, frame: Frame) -> Screenful:
        sel = frame.selection
        pal = frame.palette
        m = host_model(frame.read, sel.host_id) if sel.host_id else None
        self.model = m
        if m is None:
            return Screenful(
                styled(("HOST", pal["scope"])),
                [styled(("No host selected: pick one in the UltraServer view (u) or jump with /.", pal["warn"]))],
                [],
            )
        subject = styled(
            ("HOST ", pal["scope"]),
            (f"{m.row.number} ", pal["title"]),
            outside(m.row.name or m.row.host_id, 28, pal["text"]),
            (f" · {units.plural(len(m.row.chips), 'chip')}", pal["text"]),
        )
        return Screenful(subject, self._summary(m, frame), self._detail(m, frame))

    def move(self, sel: Selection, dx: int, dy: int) -> bool:
        """Up and down select a chip of the host."""
        if not dy or self.model is None or not self.model.row.chips:
            return False
        sel.chip = max(0, min(len(self.model.row.chips) - 1, sel.chip + dy))
        return True

    def _summary(self, m: HostModel, frame: Frame) -> list[Text]:
        pal = frame.palette
        r = m.row
        if r.state == "fresh":
            state = styled(
                (f"fresh, last report {units.age(r.age_s)} ago", pal["dim"]),
                ("  stream ", pal["label"]),
                outside(r.source_id, 40, pal["dim"]),
            )
        else:
            role = pal["bad"] if r.state == "lost" else pal["warn"]
            state = styled(
                (f"{r.state.upper()}: last report {units.age(r.age_s)} ago; the figures below are its last", role),
                ("  stream ", pal["label"]),
                outside(r.source_id, 24, pal["dim"]),
            )
        if m.source_rejected:
            state.append(f"  {m.source_rejected} rejected: ", pal["warn"])
            state.append(*outside(m.source_last_rejection, 40, pal["warn"]))
        lnc = f" (LNC {m.lnc})" if m.lnc else ""
        return [
            styled(
                ("Host ", pal["label"]),
                (f"{r.number} ", pal["title"]),
                outside(r.name or "", 32, pal["title"]),
                "  ",
                outside(r.host_id, 28, pal["text"]),
            ),
            state,
            styled(
                outside(m.instance_type or "instance type n/a", 20, pal["text"]),
                "  ",
                outside(m.device_type or "device n/a", 14, pal["text"]),
                " ",
                outside(m.neuroncore_version or "", 6, pal["dim"]),
                (f"  {units.plural(len(r.chips), 'chip')} × {m.cores_per_chip or '?'} cores{lnc}", pal["text"]),
                ("  UltraServer ", pal["label"]),
                outside(m.group or "none", 24, pal["text"]),
                *((("  pod ", pal["label"]), outside(", ".join(m.pods), 60, pal["text"])) if m.pods else ()),
            ),
            styled(
                ("CPU ", pal["label"]),
                (units.pct(m.vcpu_busy_pct), pal["text"]),
                (f" of {m.vcpu_count} vCPU" if m.vcpu_count else "", pal["dim"]),
                ("  memory ", pal["label"]),
                (units.used_of(m.memory_used_bytes, m.memory_total_bytes), pal["text"]),
            ),
        ]

    def _detail(self, m: HostModel, frame: Frame) -> list[Text]:
        pal = frame.palette
        sel = frame.selection
        title = pal["title"]
        out = [
            styled(("Chips", title), (" (Enter: chip view)", pal["dim"])),
            styled((f"  {'chip':<5}{'util':>8}   {'HBM':<32}{'ECC':>4}  util history", pal["dim"])),
        ]
        self._chip_y = {}
        period_s = m.period_s or 1.0
        fresh = m.row.state == "fresh"
        for chip, history in zip(m.row.chips, m.util_history, strict=True):
            selected = chip.index == sel.chip
            base = pal["cursor"] if selected else None
            util_style = pal.heat[units.level(chip.util_pct or 0.0, 100.0, len(pal.heat))]
            self._chip_y[len(out)] = chip.index
            hbm_text = units.used_of(chip.hbm_bytes, chip.hbm_capacity_bytes) if chip.hbm_bytes is not None else "n/a"
            out.append(
                styled(
                    (f"{'>' if selected else ' '} {chip.index:<4}", base or pal["label"]),
                    (util_glyph(chip.util_pct), util_style),
                    (f"{units.pct(chip.util_pct):>7}", pal["text"] if fresh else pal["dim"]),
                    "  ",
                    (hbm_glyph(chip.hbm_pct), pal.hbm[units.level(chip.hbm_pct or 0.0, 100.0, len(pal.hbm))]),
                    " ",
                    column(hbm_text, 32, pal["text"] if fresh else pal["dim"]),
                    (
                        f"{chip.ecc_events:>4}" + ("?" if chip.ecc_undecided else " "),
                        pal["bad"] if chip.ecc_events else pal["text"],
                    ),
                    " ",
                    (sparkline(list(history), frame.now_s, period_s, SPARK_COLS, 100.0), pal.heat[5]),
                )
            )
        if not m.row.chips:
            out.append(styled(("  no chips reported yet (no neuron_hardware_info)", pal["dim"])))

        out += [
            Text(),
            styled(("Neuron processes", title), (" (tags as reported, need not be unique; vCPU user+sys)", pal["dim"])),
        ]
        if not m.runtimes:
            out.append(styled(("  none reported", pal["dim"])))
        # Tags get the room the screen has beyond the other columns (54 cells), at least 26.
        tag_cols = max(26, min(max((cell_len(clean(rt.tag)) + 1 for rt in m.runtimes), default=0), frame.width - 54))
        for rt in m.runtimes:
            chips = ("chip " if len(rt.chips) == 1 else "chips ") + (",".join(map(str, rt.chips)) or "-")
            out.append(
                styled(
                    (f"  pid {'n/a' if rt.pid is None else rt.pid:<8}", pal["label"]),
                    column(rt.tag, tag_cols, pal["text"]),
                    column(chips, 10, pal["text"]),
                    (f"vCPU {_vcpu(rt.vcpu_user_pct, rt.vcpu_system_pct)}", pal["dim"]),
                    (f"  HBM {units.gib(rt.device_bytes)}", pal["dim"]),
                    ("" if rt.running else "  gone", pal["warn"]),
                )
            )
            if rt.error:
                out.append(styled(("      error: ", pal["bad"]), outside(rt.error, 100, pal["bad"])))
            for group, error in rt.group_errors:
                out.append(styled((f"      {group}: ", pal["warn"]), outside(error, 100, pal["warn"])))

        if m.efa_rates_per_s is not None:  # sampled (--sysfs); without it the section is left out
            out += [Text(), *_hardware_lines(m, frame)]

        if m.group_errors or m.anomalies:
            out += [Text(), styled(("Report problems", title))]
            for group, error in m.group_errors:
                out.append(styled((f"  {group}: ", pal["warn"]), outside(error, 100, pal["warn"])))
            for what, count in m.anomalies:
                out.append(styled((f"  {what}: {count}", pal["warn"])))
        return out

    def on_click(self, event: events.Click) -> None:
        detail = self.query_one(".detail", TextLines)
        region = detail.content_region
        if not region.contains_point(event.screen_offset) or self.model is None:
            return
        chip = self._chip_y.get(event.screen_y - region.y + detail.scroll_offset.y)
        if chip is not None:
            self.post_message(OpenChip(self.model.row.host_id, chip))
