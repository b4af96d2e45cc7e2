"""The command line's number types (argparse `type=`), apart from the sources so that building
the parser of a command that draws no screen imports nothing heavy (`trnwatch compare`)."""

import argparse


def positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0: {value!r}")
    return number


def non_negative(value: str) -> float:
    return positive(value) if value not in ("0", "0.0") else 0.0


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value!r}")
    return number
