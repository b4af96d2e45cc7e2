"""Numbers as text, each with its unit; an absent figure is "n/a", never a zero. One place for the
screen (tui/), the receipt's Markdown and the snapshot's text."""

import time

NA = "n/a"
GIB = 1 << 30
TIB = 1 << 40


def plural(n: int, word: str) -> str:
    """ "1 host", "36 hosts"."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def pct(value: float | None, places: int = 1) -> str:
    return NA if value is None else f"{value:.{places}f}%"


# Past any memory (1 ZiB): said as a power of two. From 2**1054 on, n / 2**30 is no float at all
# (OverflowError), and input ints are unbounded.
BEYOND_BYTES = 2**70


def _beyond(n_bytes: int) -> str:
    return f"2^{n_bytes.bit_length() - 1}+ bytes"


def gib(n_bytes: int | None, places: int = 1) -> str:
    if n_bytes is None:
        return NA
    if n_bytes >= BEYOND_BYTES:
        return _beyond(n_bytes)
    return f"{n_bytes / GIB:.{places}f} GiB"


def gbps(bytes_per_s: float | None) -> str:
    """A network rate in gigabits a second (EFA)."""
    return NA if bytes_per_s is None else f"{bytes_per_s * 8 / 1e9:.2f} Gb/s"


def size(n_bytes: int | None) -> str:
    """Bytes in MiB below 1 GiB, GiB below 1 TiB, else TiB."""
    if n_bytes is None:
        return NA
    if n_bytes >= BEYOND_BYTES:
        return _beyond(n_bytes)
    if n_bytes >= TIB:
        return f"{n_bytes / TIB:.2f} TiB"
    if n_bytes >= GIB:
        return f"{n_bytes / GIB:.1f} GiB"
    return f"{n_bytes / (1 << 20):.1f} MiB"


def used_of(used_bytes: int | None, capacity_bytes: int | None) -> str:
    """ "12.3 / 144.0 GiB (8.5%)", with the capacity's unit for both figures."""
    if used_bytes is None:
        return NA
    if capacity_bytes is None or max(used_bytes, capacity_bytes) >= BEYOND_BYTES:
        return f"{size(used_bytes)} of {'unknown capacity' if capacity_bytes is None else size(capacity_bytes)}"
    unit, div = ("TiB", TIB) if capacity_bytes >= TIB else ("GiB", GIB)
    share = 100.0 * used_bytes / capacity_bytes if capacity_bytes else None
    return f"{used_bytes / div:.2f} / {capacity_bytes / div:.2f} {unit} ({pct(share)})"


def age(seconds: float | None) -> str:
    """An age as "4 s", "3 min", "2 h"."""
    if seconds is None:
        return NA
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def flops(value: float | None) -> str:
    """Floating point operations per second, in TFLOP/s."""
    return NA if value is None else f"{value / 1e12:.1f} TFLOP/s"


def latency(seconds: float | None) -> str:
    if seconds is None:
        return NA
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def clock(t_s: float | None) -> str:
    """Time of day in UTC, "14:02:33"."""
    return NA if t_s is None else time.strftime("%H:%M:%S", time.gmtime(t_s))


def clock_utc(t_s: float | None) -> str:
    """Time of day in UTC: the screen's clock is the session's clock, the same on every host."""
    if t_s is None:
        return "--:--:-- UTC"
    return f"{clock(t_s)} UTC"


def level(value: float, maximum: float, steps: int) -> int:
    """Bucket 0..steps-1 of `value` in [0, maximum]; values outside are clamped."""
    if maximum <= 0:
        return 0
    return max(0, min(steps - 1, int(value / maximum * steps)))
