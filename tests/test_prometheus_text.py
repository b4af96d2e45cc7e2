"""trnwatch's reader of the exposition text format against prometheus_client's own parser (the
reference, prometheus_client/parser.py): the same samples on every real capture and on simulator
bodies, and on mutated bodies, whatever trnwatch accepts prometheus_client reads the same."""

import random

import pytest
from prometheus_client.parser import text_string_to_metric_families

from trnwatch.collectors.prometheus import READ_PREFIXES, scrape_samples
from trnwatch.collectors.prometheus_text import ExpositionError, samples
from trnwatch.workloads.sim.exporter import ExporterState, _process_series
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.topology import get_topology
from tests.test_neuron_monitor import realworld

CAPTURES = ("prom-inf1kr-idle.txt", "prom-inf1kr-running.txt", "prom-otel-trn1n-trimmed.txt")


def reference(body: str, wanted: tuple[str, ...] = READ_PREFIXES) -> list:
    """prometheus_client's samples of the wanted families, as (name, labels, value)."""
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name.startswith(wanted) and not s.name.endswith("_created")
    ]


def simulator_body(topology: str, scenario: str, ticks: range) -> str:
    host = SimHost(get_topology(topology), 0, 1, scenario, 1.0)
    state = ExporterState()
    for tick in ticks:
        state.consume(host.report(tick))
    return _process_series() + state.render()


@pytest.mark.parametrize("name", CAPTURES)
def test_real_captures_give_exactly_prometheus_clients_samples(name):
    body = realworld(name)
    got = scrape_samples(body)
    assert got == reference(body) and len(got) >= 10
    everything = ("",)  # every family, python_* and process_* too
    assert samples(body, everything) == reference(body, everything)


@pytest.mark.parametrize(
    "topology, scenario, ticks",
    [
        ("trn3-gen2-us", "healthy", range(24, 26)),
        ("trn3-gen2-us", "hang", range(26, 34)),
        ("trn3-gen1-us", "ecc", range(48, 53)),
        ("trn2.48xlarge", "healthy", range(30, 32)),
    ],
)
def test_simulator_bodies_give_exactly_prometheus_clients_samples(topology, scenario, ticks):
    body = simulator_body(topology, scenario, ticks)
    got = scrape_samples(body)
    assert got == reference(body) and len(got) > 100


def test_counter_families_and_stray_samples_follow_prometheus_clients_rules():
    body = (
        "\n".join(
            [
                "# TYPE neuron_a counter",  # a counter named without _total: its samples get it
                'neuron_a{x="1"} 3',
                '# HELP neuron_b doc with "quotes" and\ttabs',
                "# TYPE neuron_b gauge",
                "neuron_b 1e3",
                "python_other 5",  # not of family neuron_b: an untyped family of its own ...
                'neuron_b{y="a\\"b\\\\c\\nd\\t"} +Inf 1700000000000',  # ... so this one is too
                "   ",
                "# some comment",
                'neuron_c{z="},{"} -0.5',
                "neuron_d\t7",
            ]
        )
        + "\n"
    )
    assert samples(body, ("neuron_",)) == reference(body, ("neuron_",))
    assert [name for name, _, _ in samples(body, ("neuron_",))] == [
        "neuron_a_total",
        "neuron_b",
        "neuron_b",
        "neuron_c",
        "neuron_d",
    ]


def test_a_name_is_read_by_the_family_it_is_in_each_time():
    # The reader keeps what a name is read as until the family changes: here the same name is
    # met in a counter family (`_total` added), as a stray after another family's HELP (an untyped
    # family of its own), and in a gauge family of its own name.
    body = "\n".join(
        [
            "# TYPE neuron_a counter",
            'neuron_a{x="1"} 1',
            'neuron_a{x="2"} 2',
            "# HELP neuron_b doc",
            'neuron_a{x="1"} 3',
            'neuron_b{x="1"} 4',
            "# HELP neuron_a doc",
            "# TYPE neuron_a gauge",
            'neuron_a{x="1"} 5',
            'neuron_a_created{x="1"} 6',
            'neuron_a{x="1"} 7',
        ]
    )
    got = samples(body, ("neuron_",))
    assert got == reference(body, ("neuron_",))
    assert [(name, value) for name, _, value in got] == [
        ("neuron_a_total", 1.0),
        ("neuron_a_total", 2.0),
        ("neuron_a", 3.0),
        ("neuron_b", 4.0),
        ("neuron_a", 5.0),
        ("neuron_a", 7.0),
    ]


def test_a_label_set_repeated_across_families_reads_the_same_each_time():
    # Label text is checked once per body: a repeated block gives equal labels, and a malformed
    # one is refused wherever it repeats, as is a good block followed by a bad value.
    block = '{instance_id="i-1",neuroncore="0",runtime_tag="r"}'
    body = "\n".join(
        [
            "# TYPE neuroncore_memory_usage_tensors gauge",
            f"neuroncore_memory_usage_tensors{block} 1.0",
            "# TYPE neuroncore_memory_usage_constants gauge",
            f"neuroncore_memory_usage_constants{block} 2.0",
            f"neuroncore_memory_usage_constants{block} 3e+08",
        ]
    )
    assert samples(body, READ_PREFIXES) == reference(body) and len(reference(body)) == 3
    bad_block = '{instance_id="i-1",neuroncore="0"x}'
    for line in (f"neuroncore_memory_usage_tensors{bad_block} 1.0", f"neuroncore_memory_usage_tensors{block} 1.0x"):
        with pytest.raises(ExpositionError):
            samples(f"{body}\n{line}\n", READ_PREFIXES)


@pytest.mark.parametrize(
    "comment",
    [
        "# TYPE  neuron_a counter",  # two blanks: prometheus_client splits at runs of whitespace
        "# TYPE neuron_a  counter",
        "# TYPE\tneuron_a counter",
        "# TYPE neuron_a\x0bcounter",
        "# TYPE neuron_a\x0ccounter",
        "# TYPE neuron_a\rcounter",
        "#  TYPE neuron_a counter",
        "# TYPE neuron_a counter extra",  # not a known type: refused by both
        "# TYPE neuron_a counter\x1c",  # \x1c is not ASCII whitespace to prometheus_client
        "# HELP  neuron_a  doc  with  blanks",
        "# HELP neuron_a",
        "# HELP",
        "#HELP neuron_a doc",
    ],
)
def test_comment_lines_are_split_as_prometheus_client_splits_them(comment):
    body = f'# HELP neuron_z doc\n{comment}\nneuron_a{{x="1"}} 1\n'
    try:
        expected = reference(body, ("neuron_",))
    except ValueError:
        with pytest.raises(ExpositionError):
            samples(body, ("neuron_",))
        return
    assert samples(body, ("neuron_",)) == expected


@pytest.mark.parametrize("name", CAPTURES)
def test_the_families_read_are_exactly_the_full_readers(name):
    # Only the families of READ_PREFIXES are read strictly, the rest skipped by name: what is
    # read is exactly what reading every family gives for them.
    for body in (realworld(name), simulator_body("trn3-gen2-us", "healthy", range(24, 26))):
        full = samples(body, ("",))
        assert scrape_samples(body) == [s for s in full if s[0].startswith(READ_PREFIXES)]


@pytest.mark.parametrize(
    "line",
    [
        '{__name__="neuroncore_utilization_ratio",instance_id="i-1"} 0.5',  # issue 9.2: a line starting with "{"
        'neuroncore_utilization_ratio{instance_id="i-1" 0.5',
        'neuroncore_utilization_ratio{instance_id="i-1",instance_id="i-2"} 0.5',
        'neuroncore_utilization_ratio{instance_id="i-1",b,c="2"} 0.5',  # a comma inside a label name
        'neuroncore_utilization_ratio{instance_id="i-1",__x="2"} 0.5',  # a reserved label name
        'neuroncore_utilization_ratio{instance_id="i-1",} 0.5 extra',
        "neuroncore_utilization_ratio{,} 0.5",
        'neuroncore_utilization_ratio{instance_id="i-1","} 0.5',  # an odd number of quotes
        "neuroncore_utilization_ratio 1_000",
        "neuroncore_utilization_ratio",
        "neuroncore_utilization_ratio 1 x",
        "# TYPE neuron-bad gauge",
        "# TYPE neuron_x",
    ],
)
def test_malformed_lines_are_refused_with_a_reason(line):
    with pytest.raises(ExpositionError):
        samples(f"# HELP x y\n{line}\n", READ_PREFIXES)


def _mutations(body: str, rng: random.Random, count: int):
    lines = body.split("\n")
    alphabet = ['"', "{", "}", ",", "=", " ", "\t", "\\", "#", "_", "e", "1", ".", "-", "+", "n", "\u00a0", "\x0b"]
    for _ in range(count):
        mutated = list(lines)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(mutated))
            line = mutated[i]
            at = rng.randrange(len(line) + 1)
            op = rng.randrange(3)
            if op == 0:
                line = line[:at] + rng.choice(alphabet) + line[at:]
            elif op == 1:
                line = line[:at] + line[at + 1 :]
            else:
                line = line[:at] + rng.choice(alphabet) * rng.randint(1, 3) + line[at + 2 :]
            mutated[i] = line
        yield "\n".join(mutated)


def test_whatever_is_accepted_reads_as_prometheus_client_reads_it():
    # `_created` lines are only skipped over, never read (so never refused): leave them out here.
    base = "\n".join(line for line in realworld("prom-otel-trn1n-trimmed.txt").split("\n") if "_created" not in line)
    rng = random.Random(9)
    accepted = refused = 0
    everything = ("",)  # every sample line read strictly, none only skipped over
    for body in _mutations(base, rng, 1500):
        try:
            ours = samples(body, everything)
        except ExpositionError:
            refused += 1
            continue
        accepted += 1
        assert ours == reference(body, everything), body
    assert accepted > 500 and refused > 100  # both sides of the reader were exercised
