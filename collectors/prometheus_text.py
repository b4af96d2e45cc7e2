"""The Prometheus text exposition format (version 0.0.4), read the way prometheus_client reads it.

`samples(body, wanted)` gives the (name, labels, value) of every sample whose name starts with one
of `wanted`, in text order, exactly as prometheus_client's `text_string_to_metric_families`
(prometheus_client/parser.py, 0.2x) gives them for a body written in the strict form every
exporter writes (`name{label="value",...} value`, HELP and TYPE comments): the same family rules
(a sample whose name does not belong to the family of the last HELP/TYPE line starts an untyped
family of its own; a counter family whose name lacks `_total` gets `_total` on its samples), the
same value reading (`int`, else `float`; no `_`), the same label unescaping (`\\\\`, `\\n`, `\\"`).
tests/test_prometheus_text.py checks that on every real capture and on simulator bodies, and that
whatever this reader accepts, prometheus_client reads the same.

It is stricter than prometheus_client where exporters never go: a sample line of a wanted family
must be `name{pairs}` with no blanks inside the braces and no metric name inside them, and
quoted (UTF-8) names are not read; such a body is refused with `ExpositionError`, like one
prometheus_client refuses. Lines of other families are only looked at for their name, so the
python_* and process_* series of a scrape cost a string search each. Within one body, what a name
is read as is worked out once per family, and each distinct label block is checked and split
once: samples with the same label text share one labels dict, so callers must not change it.
This is what makes a Gen2 host's 85 KB body cost ~1.1 ms instead of prometheus_client's ~20 ms
(tests/benchmarks/bench_prometheus.py --scrape-only).
"""

import re

Sample = tuple[str, dict[str, str], float]


class ExpositionError(ValueError):
    """A body that is not the text format as exporters write it; the message says where."""


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_QUOTED = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_PAIR_TEXT = rf"[a-zA-Z_][a-zA-Z0-9_]*={_QUOTED}"
# A label block with escapes in it: pairs separated by single commas, an optional trailing comma.
_BLOCK = re.compile(rf"\{{((?:{_PAIR_TEXT}(?:,{_PAIR_TEXT})*,?)?)\}}")
_PAIR = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*)=({_QUOTED})")
_LABEL_NAMES = re.compile(r'[a-zA-Z_][a-zA-Z0-9_]*(?:"[a-zA-Z_][a-zA-Z0-9_]*)*')  # joined by '"'
_ESCAPE = re.compile(r'\\[\\n"]')
_UNESCAPED = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
# prometheus_client splits comment lines on ASCII whitespace only (string.whitespace).
_COMMENT_SPLIT = re.compile(r"[ \t\n\r\x0b\x0c]+")
_TYPE_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}
# The types prometheus_client accepts (metrics_core.METRIC_TYPES, and "untyped").
_TYPES = {"counter", "gauge", "summary", "histogram", "gaugehistogram", "unknown", "info", "stateset", "untyped"}


def _value(token: str) -> int | float:
    """A value as prometheus_client reads it: `int`, else `float`, never with `_`."""
    if "_" in token:
        raise ValueError(f"invalid value {token!r}")
    if "." in token or "e" in token or "E" in token:
        return float(token)  # int() refuses these: skip its exception
    try:
        return int(token)
    except ValueError:
        return float(token)


def _value_and_timestamp(rest: str, line: str) -> float:
    """The sample value after the name/labels, read as prometheus_client reads it (first of the
    blank-separated values; the last one, if several, must read as a timestamp)."""
    text = rest.lstrip()  # `line` is stripped: nothing trails
    try:
        if " " not in text and "\t" not in text:  # no timestamp: the common form
            if not text:
                raise ValueError("no value")
            return float(_value(text))
        separator = " " if " " in text else "\t"
        values = [v.strip() for v in text.split(separator) if v.strip()]
        value = _value(values[0])
        if len(values) > 1:
            _value(values[-1])
        return float(value)
    except (ValueError, OverflowError) as exc:
        raise ExpositionError(f"{exc}: {line[:120]!r}") from None


# A block's seams (what is outside its quotes) -> its label names, None if they are not label
# names in the strict form; kept for one body.
_KeysOf = dict[tuple[str, ...], tuple[str, ...] | None]
_UNSEEN: tuple[str, ...] = ("",)  # not in `keys_of` ("" is no label name)


def _plain_labels(block: str, keys_of: _KeysOf) -> dict[str, str] | None:
    """Labels of a block without backslashes, so without a quote inside a value: split at its
    quotes, it alternates seams (`name=`, `,name=`, ..., then "" or a trailing ",") and values.
    None if the block is malformed. A body repeats few seam sequences (the label names of each
    family): each is checked once, in `keys_of`."""
    parts = block.split('"')
    if not len(parts) % 2:  # an odd number of quotes
        return None
    seams = tuple(parts[0::2])
    keys = keys_of.get(seams, _UNSEEN)
    if keys is _UNSEEN:
        keys = keys_of[seams] = _label_keys(seams)
    if keys is None:
        return None
    return dict(zip(keys, parts[1::2], strict=False))  # one value per name: an even number of quotes


def _label_keys(seams: tuple[str, ...]) -> tuple[str, ...] | None:
    """The label names a block's seams give, None if they are not `name=`, `,name=`, ..., then ""
    (or "," after at least one pair), or a name is not a label name or comes twice."""
    if len(seams) == 1:
        return () if seams[0] == "" else None
    first, middle, last = seams[0], seams[1:-1], seams[-1]
    if last not in ("", ",") or first[-1:] != "=" or not all(s[:1] == "," and s[-1:] == "=" for s in middle):
        return None
    keys = (first[:-1], *(s[1:-1] for s in middle))
    names = '"'.join(keys)  # a seam holds no quote
    # Label names: ASCII identifiers, and `__` names are reserved (`__name__` would give the
    # metric name twice).
    if not _LABEL_NAMES.fullmatch(names) or '"__' in f'"{names}' or len(set(keys)) != len(keys):
        return None
    return keys


def _label_name_ok(name: str) -> bool:
    # ASCII identifiers are exactly [a-zA-Z_][a-zA-Z0-9_]*; `__` names are reserved (and
    # `__name__` would give the metric name twice).
    return name.isascii() and name.isidentifier() and not name.startswith("__")


def _escaped_labels(block: str) -> dict[str, str] | None:
    pairs = _PAIR.findall(block)
    labels = {name: _ESCAPE.sub(lambda m: _UNESCAPED[m.group(0)], value[1:-1]) for name, value in pairs}
    if len(labels) != len(pairs) or not all(_label_name_ok(name) for name in labels):
        return None
    return labels


def _read_sample(line: str, keys_of: _KeysOf) -> tuple[str, dict[str, str], str]:
    """Name, labels and the text after them of a sample line in the strict form."""
    labels: dict[str, str] | None
    brace = line.find("{")
    if brace < 0:
        blank = _first_blank(line)
        name, labels, rest = line[:blank], {}, line[blank:]
    else:
        name = line[:brace]
        if "\\" in line:
            labels, rest = _escaped_block(line, brace)
        else:
            end = line.rfind("}")
            labels, rest = _plain_labels(line[brace + 1 : end], keys_of), line[end + 1 :]
    if labels is None or not _NAME.fullmatch(name) or rest[:1] not in (" ", "\t"):
        raise ExpositionError(f'not a sample line (name{{label="value",...}} value): {line[:120]!r}')
    return name, labels, rest


def _escaped_block(line: str, brace: int) -> tuple[dict[str, str] | None, str]:
    """Labels and the text after them of a line whose label block (at `brace`) has escapes."""
    block = _BLOCK.match(line, brace)
    if block is None:
        return None, ""
    return _escaped_labels(block.group(1)), line[block.end() :]


def _first_blank(line: str) -> int:
    """Where the first space or tab is (the length of the line if none)."""
    blanks = [i for i in (line.find(" "), line.find("\t")) if i >= 0]
    return min(blanks) if blanks else len(line)


def _sample_name(line: str) -> str:
    """The name of a sample line that is not read, as prometheus_client finds it (enough to
    follow the family rules)."""
    brace = line.find("{")
    if brace >= 0 and " # " not in line[:brace]:
        return line[:brace].strip()
    blank = _first_blank(line)
    return line[: blank if blank < len(line) else -1].strip()


def samples(body: str, wanted: tuple[str, ...]) -> list[Sample]:
    """The samples of `body` whose names start with one of `wanted` (and do not end in
    `_created`), in text order; `ExpositionError` if the body is malformed."""
    out: list[Sample] = []
    family = _UNTYPED
    keys_of: _KeysOf = {}
    # Names of common-form lines (`name{...} value`) met since the family last changed -> the name
    # their samples are read as, "" if they are not read. The family rules look at the name only,
    # so a name's next lines in the same family need neither its check nor the rules again.
    read_as: dict[str, str] = {}
    # Label blocks without escapes -> their labels, checked once per body: a body repeats its
    # label sets (a core's five memory categories, the instance labels of the system series).
    blocks: dict[str, dict[str, str]] = {}
    escapes = "\\" in body  # label values with escapes need the slower block reader
    for line in body.split("\n"):
        line = line.strip()
        if not line:
            continue
        if line[0] == "#":
            after = _comment(line, family)
            if after is not family:
                family = after
                read_as.clear()
            continue
        if line[0] == "{":
            raise ExpositionError(f"a metric name inside the braces is not read: {line[:120]!r}")
        brace = line.find("{")
        name = line[:brace]
        as_name = read_as.get(name) if brace > 0 else None
        if as_name is None:
            if brace > 0 and _NAME.fullmatch(name):  # the common form, a name new to this family
                after, as_name = _sample_family(name, family)
                if after is not family:
                    family = after
                    read_as.clear()
                if not name.startswith(wanted) or name.endswith("_created"):
                    as_name = ""  # `_created` series (a counter's creation time) are never read
                read_as[name] = as_name
            else:  # any other form: read in full
                read = line.startswith(wanted) and not _sample_name(line).endswith("_created")
                if read:
                    name, labels, rest = _read_sample(line, keys_of)
                else:
                    name = _sample_name(line)  # only its name counts
                after, as_name = _sample_family(name, family)
                if after is not family:
                    family = after
                    read_as.clear()
                if read:
                    out.append((as_name, labels, _sample_value(rest, line)))
                continue
        if not as_name:
            continue
        if escapes and "\\" in line:
            found, rest = _escaped_block(line, brace)
        else:
            end = line.rfind("}")
            block = line[brace + 1 : end]
            found = blocks.get(block)
            if found is None:
                found = _plain_labels(block, keys_of)
                if found is not None:
                    blocks[block] = found
            rest = line[end + 1 :]
        if found is None or rest[:1] not in (" ", "\t"):
            raise ExpositionError(f'not a sample line (name{{label="value",...}} value): {line[:120]!r}')
        out.append((as_name, found, _sample_value(rest, line)))
    return out


def _sample_value(rest: str, line: str) -> float:
    """The value of a sample line from `rest`, the text after its name and labels (a blank first)."""
    text = rest[1:]
    # The common value, `1.5` or `2e+09` after one blank: float() reads it as prometheus_client
    # does (int() would refuse it). Anything else is read in full.
    if rest[0] == " " and ("." in text or "e" in text) and "_" not in text and " " not in text and "\t" not in text:
        try:
            return float(text)
        except ValueError:
            pass
    return _value_and_timestamp(rest, line)


# The family state while a body is read: (family name, the sample names it allows, whether its
# samples get `_total`, for a counter family named without it).
_Family = tuple[str, tuple[str, ...], bool]
_UNTYPED: _Family = ("", (), False)


def _sample_family(name: str, family: _Family) -> tuple[_Family, str]:
    """The family state after a sample named `name`, and the name its sample is read as."""
    if name not in family[1]:
        return _UNTYPED, name  # an untyped family of its own
    return family, name + "_total" if family[2] else name


def _comment(line: str, family: _Family) -> _Family:
    """The family state after comment `line`: HELP and TYPE lines start a family, others are
    skipped; `ExpositionError` for a HELP or TYPE line without a metric name or known type."""
    parts = _comment_fields(line)
    if len(parts) < 2 or (len(parts) > 2 and parts[1] not in ("HELP", "TYPE")):
        return family
    name = parts[2] if len(parts) > 2 else ""
    if name and not _NAME.fullmatch(name):
        raise ExpositionError(f"not a metric name in {line[:120]!r}")
    if parts[1] == "HELP":
        if name != family[0]:
            return name, (name,), False
    elif parts[1] == "TYPE":
        if len(parts) < 4 or parts[3] not in _TYPES:
            raise ExpositionError(f"TYPE without a known type: {line[:120]!r}")
        suffixes = _TYPE_SUFFIXES.get(parts[3], ("",))
        return (
            name,
            tuple([name + suffix for suffix in suffixes]),
            parts[3] == "counter" and not name.endswith("_total"),
        )
    return family


def _comment_fields(line: str) -> list[str]:
    """`line` split as prometheus_client splits a comment line: at most 3 times, at runs of ASCII
    whitespace. The common line, fields one space apart, is split on that space (a tenth of the
    regex's cost)."""
    parts = line.split(" ", 3)
    if (
        "" in parts[:3]
        or (len(parts) == 4 and parts[3][:1] == " ")
        or "\t" in line
        or "\r" in line
        or "\x0b" in line
        or "\x0c" in line
    ):
        return _COMMENT_SPLIT.split(line, 3)
    return parts
