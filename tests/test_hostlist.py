"""Which hosts get watched: Slurm hostlists, hosts files, and host names that must never reach ssh."""

from pathlib import Path

import pytest

from trnwatch.collectors.hostlist import (
    MAX_HOSTS,
    HostEntry,
    HostlistError,
    HostNameError,
    check_host_name,
    expand_hostlist,
    load_hosts_file,
    slurm_job_hosts,
)
from trnwatch.collectors.ultraserver_map import load_ultraserver_map

HOSTILE_NAMES = [
    "-oProxyCommand=x",
    "-oProxyCommand=touch /tmp/pwned",
    "a;rm -rf /",
    "$(id)",
    "`id`",
    "host name",
    "host\nname",
    "host\tname",
    "host\x1b[31m",
    "a|b",
    "a&b",
    "a>b",
    "'quoted'",
    "-",
    "user@-host",
    "-user@host",
    "",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_host_names_are_refused(name):
    with pytest.raises(HostNameError):
        check_host_name(name)


def test_refusal_says_which_rule_the_name_breaks():
    with pytest.raises(HostNameError, match="starts with '-'.*option"):
        check_host_name("-oProxyCommand=x")
    with pytest.raises(HostNameError, match="metacharacter ';'"):
        check_host_name("a;b")
    with pytest.raises(HostNameError, match="whitespace"):
        check_host_name("a b")
    with pytest.raises(HostNameError, match="control character"):
        check_host_name("a\x07b")


@pytest.mark.parametrize(
    "name",
    ["trn3-001", "ip-10-0-1-17.us-east-2.compute.internal", "ubuntu@trn3-001", "::1", "fe80::1", "10.0.0.5", "node_7"],
)
def test_ordinary_host_names_pass(name):
    assert check_host_name(name) == name


def test_range_keeps_the_lower_bound_padding():
    assert expand_hostlist("trn3-[001-003]") == ["trn3-001", "trn3-002", "trn3-003"]
    assert expand_hostlist("n[8-11]") == ["n8", "n9", "n10", "n11"]


def test_lists_commas_and_several_bracket_groups_multiply_out():
    assert expand_hostlist("a[1,3,5-6],head") == ["a1", "a3", "a5", "a6", "head"]
    assert expand_hostlist("rack[1-2]-n[01-02]") == ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]


def test_thirty_six_hosts_of_an_ultraserver():
    hosts = expand_hostlist("trn3-[001-036]")
    assert len(hosts) == 36 and hosts[0] == "trn3-001" and hosts[-1] == "trn3-036"


def test_spaces_around_items_are_not_part_of_a_name():
    assert expand_hostlist("trn3-[001-002], trn3-010 ") == ["trn3-001", "trn3-002", "trn3-010"]


def test_thousands_of_bracket_groups_give_a_clear_refusal():
    with pytest.raises(HostNameError, match="longer than"):
        expand_hostlist("x" + "[1]" * 2000)


def test_duplicates_are_listed_once():
    assert expand_hostlist("a[1-2],a1") == ["a1", "a2"]


@pytest.mark.parametrize(
    "expression, message",
    [
        ("x[1-", "unmatched '\\['"),
        ("x]1", "unmatched '\\]'"),
        ("x[[1]]", "nested"),
        ("x[3-1]", "backwards"),
        ("x[a-b]", "bad range"),
        ("x[]", "bad range"),
        (f"x[0-{MAX_HOSTS + 5}]", "more than"),
        ("a[0-999]b[0-999]", "more than"),
        (" , ", "no hosts"),
        # Bounds python-hostlist 2.3.0 does not keep (README, "Hosts"): the whole expression's total
        # across items and across the ranges of one bracket, and a name built from thousands of groups.
        (",".join(f"h{i}[0-9999]" for i in range(7)), "more than"),
        ("x[" + ",".join(["0-9999"] * 7) + "]", "more than"),
    ],
)
def test_malformed_hostlists_are_refused(expression, message):
    with pytest.raises(HostlistError, match=message):
        expand_hostlist(expression)


def test_hostlist_cannot_smuggle_an_option_or_a_command():
    with pytest.raises(HostNameError):
        expand_hostlist("good,-oProxyCommand=x")
    with pytest.raises(HostNameError):
        expand_hostlist("trn[1-2];reboot")


def test_slurm_job_nodelist_is_used_inside_a_job():
    assert slurm_job_hosts({"SLURM_JOB_NODELIST": "trn3-[001-002],trn3-010"}) == ["trn3-001", "trn3-002", "trn3-010"]
    with pytest.raises(HostlistError, match="not inside a Slurm job"):
        slurm_job_hosts({})


def test_hosts_file_gives_ultraserver_and_label(tmp_path):
    path = tmp_path / "hosts"
    path.write_text(
        "# rack A\ntrn3-001 us-a a01\ntrn3-[002-003] us-a   # a range, labelled by name\nhead - login\n\nplain\n"
    )
    assert load_hosts_file(path) == [
        HostEntry("trn3-001", "a01", "us-a"),
        HostEntry("trn3-002", "trn3-002", "us-a"),
        HostEntry("trn3-003", "trn3-003", "us-a"),
        HostEntry("head", "login", None),
        HostEntry("plain", "plain", None),
    ]


@pytest.mark.parametrize(
    "content, message",
    [
        ("a us b extra\n", "expected 'HOST \\[ULTRASERVER \\[LABEL\\]\\]'"),
        ("a[1-2] us label\n", "a label names one host"),
        ("a\na\n", "host 'a' is already on line 1"),
        ("a us x\nb us x\n", "label 'x' is already on line 1"),
        ("-oProxyCommand=x\n", "starts with '-'"),
        ("# nothing\n", "no hosts"),
    ],
)
def test_bad_hosts_files_name_the_line(tmp_path, content, message):
    path = tmp_path / "hosts"
    path.write_text(content)
    with pytest.raises(HostlistError, match=message):
        load_hosts_file(path)


def test_unreadable_hosts_file(tmp_path):
    with pytest.raises(HostlistError, match="cannot read"):
        load_hosts_file(tmp_path / "missing")
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(HostlistError, match="not UTF-8"):
        load_hosts_file(binary)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_as_hosts_file_or_map_is_refused_after_a_bounded_read(device):
    """/dev/zero never ends and /dev/urandom never ends either: refused after 16 MiB, in words
    (a MemoryError or a read that never returns before)."""
    with pytest.raises(HostlistError, match=rf"{device} is over 16 MiB: not a text file trnwatch reads"):
        load_hosts_file(Path(device))
    with pytest.raises(ValueError, match=rf"{device} is over 16 MiB"):
        load_ultraserver_map(Path(device))


def test_hosts_files_with_crlf_line_ends_read_as_before(tmp_path):
    path = tmp_path / "hosts"
    path.write_bytes(b"trn-01 us-a\r\ntrn-02 us-a\r\n")
    assert [e.host for e in load_hosts_file(path)] == ["trn-01", "trn-02"]
