"""The JSON Schemas `trnwatch schema` prints are checked in (docs/schemas/), so every change to a
contract shows up as a diff of these files in review."""

from pathlib import Path

import pytest

from trnwatch import cli

SCHEMAS = Path(__file__).resolve().parent.parent / "docs" / "schemas"
CONTRACTS = ["receipt", "snapshot", "job", "neuron-monitor"]
REGENERATE = "for c in receipt snapshot job neuron-monitor; do trnwatch schema $c > docs/schemas/$c.json; done"


@pytest.mark.parametrize("contract", CONTRACTS)
def test_the_printed_schema_equals_the_checked_in_one(contract, capsys):
    assert cli.main(["schema", contract]) == 0
    printed = capsys.readouterr().out
    path = SCHEMAS / f"{contract}.json"
    checked_in = path.read_text() if path.exists() else ""
    assert printed == checked_in, (
        f"`trnwatch schema {contract}` no longer prints {path.relative_to(SCHEMAS.parent.parent)}: "
        f"if the contract change is meant, regenerate them all ({REGENERATE}), "
        "review the diff and say in docs/contracts.md what changed"
    )


def test_every_contract_the_command_offers_is_checked_in():
    (schema_command,) = [
        action.choices["schema"]
        for action in cli.build_parser("schema")._actions
        if isinstance(action.choices, dict) and "schema" in action.choices
    ]
    (contract_argument,) = [a for a in schema_command._actions if a.dest == "contract"]
    assert sorted(contract_argument.choices) == sorted(CONTRACTS)
    assert sorted(p.stem for p in SCHEMAS.glob("*.json")) == sorted(CONTRACTS)
