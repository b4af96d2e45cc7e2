"""The generic step profile: the step lines people write in their own training loops, read when
no framework profile is detected (`fallback`: a line that detects a framework later replaces it).

The forms: a step counter (`step 12`, `Step: 12`, `iter 12`, `iteration=12`, `global_step 12`,
`12/1000` at the start of a line, `[12/1000]`), then anywhere after it a loss (`loss 2.31`,
`loss=2.31`, `loss: 2.31`), seconds per step (`0.41 s/it`, `0.41 s/iter`, `0.41 s/step`,
`0.41 sec/it`) or steps per second (`2.4 it/s`). Launcher prefixes (`[rank1]:`, `[default1]:`)
are read by the translator for every profile. Data only: the translator is log_profiles.py.
"""

from trnwatch.collectors.log_profiles import LogProfile

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_LOSS = rf"(?:{_NUMBER}|[-+]?nan|[-+]?inf)"
# After the counter, each figure anywhere on the line (optional lookaheads: any order, any may lack).
_FIGURES = (
    rf"(?:(?=.*?\bloss\b\s*[:=]?\s*(?P<loss>{_LOSS})\b))?"
    rf"(?:(?=.*?(?<![\w.])(?P<s_per_it>{_NUMBER})\s*(?:s|sec|secs)\s*/\s*(?:it|iter|step)\b))?"
    rf"(?:(?=.*?(?<![\w.])(?P<it_per_s>{_NUMBER})\s*it\s*/\s*s\b))?"
)
_WORD_COUNTER = r"(?i:\b(?:global[_ ]?)?(?:step|iter|iteration)\b)\s*[:=#]?\s*(?P<step>\d+)(?:\s*/\s*\d+)?\b"
_FRACTION_COUNTER = r"^\s*\[?(?P<step>\d+)\s*/\s*\d+\b\]?"
# A counter alone is no step line ("step 3 of the recipe"): a figure must follow it.
_HAS_FIGURE = rf"(?=.*?(?:\bloss\b\s*[:=]?\s*{_LOSS}|{_NUMBER}\s*(?:s|sec|secs)\s*/\s*(?:it|iter|step)\b|{_NUMBER}\s*it\s*/\s*s\b))"

GENERIC = {
    "name": "generic",
    "description": "hand-written step lines (step N / iter N / N/M with loss L, T s/it or it/s), "
    "read when no framework profile is detected",
    "source": "no framework: the common forms of a training loop's own print()",
    "fallback": True,
    "detect": [_WORD_COUNTER + _HAS_FIGURE, _FRACTION_COUNTER + _HAS_FIGURE],
    "rules": [
        {"pattern": _WORD_COUNTER + _HAS_FIGURE + _FIGURES, "emit": [{"event": "step"}]},
        {"pattern": _FRACTION_COUNTER + _HAS_FIGURE + _FIGURES, "emit": [{"event": "step"}]},
    ],
}

GENERIC_PROFILE = LogProfile.model_validate(GENERIC)

# A profile file that reads `it=12 ...` lines: the ready example the hint gives (a test loads it).
EXAMPLE_PROFILE_FILE = """[[profile]]
name = "mine"
[[profile.rules]]
pattern = 'it=(?P<step>\\d+)'
emit = [{event = "step"}]
"""


def no_step_hint(choices: str) -> str:
    """What to do when a log gave no line any profile reads (the screen's and receipt's reason,
    stderr once): the profile options with a ready example, or the emitter."""
    example = " / ".join(EXAMPLE_PROFILE_FILE.splitlines())
    return (
        f"no step line recognised: pick a profile with --log-profile ({choices}), write one for "
        f"--log-profile-file (a file holding: {example}), or run the in-job emitter (docs/job-telemetry.md)"
    )
