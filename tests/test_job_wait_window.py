"""A rank's wait window (`job_ranks.WaitWindow`) keeps its median ready as collectives fold: it
must equal what the straggler rule computed before, `statistics.median` of the window's per-step
waits, with the window itself as before (a deque of the last WAIT_WINDOW_STEPS steps, each
collective's wait added to its step's total)."""

from collections import deque
from statistics import median

from hypothesis import given, settings
from hypothesis import strategies as st

from trnwatch.ledger.job_ranks import WAIT_WINDOW_STEPS, WaitWindow

# Collectives as they fold: each either adds to the newest step or starts a later one, with
# waits drawn so that ties, zeros and sums of several collectives all occur.
WAITS_S = st.one_of(
    st.sampled_from([0.0, 0.001, 0.002, 0.25]),
    st.floats(min_value=0.0, max_value=30.0, allow_nan=False, allow_infinity=False),
)
COLLECTIVES = st.lists(st.tuples(st.integers(min_value=0, max_value=3), WAITS_S), max_size=300)


@settings(max_examples=300, deadline=None)
@given(COLLECTIVES)
def test_incremental_median_equals_statistics_median_of_the_window(collectives):
    window = WaitWindow()
    reference: deque[list] = deque(maxlen=WAIT_WINDOW_STEPS)  # the fold before WaitWindow
    step = 0
    for step_gap, wait_s in collectives:
        step += step_gap
        window.add(step, wait_s)
        if reference and reference[-1][0] == step:
            reference[-1][1] += wait_s
        else:
            reference.append([step, wait_s])
        assert [list(pair) for pair in window.steps] == list(reference)
        assert len(window) == len(reference)
        assert window.median_s() == median(wait for _, wait in reference)
    window.clear()
    assert len(window) == 0
    window.add(step, 0.5)
    assert window.median_s() == 0.5
