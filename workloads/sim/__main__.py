"""`python -m trnwatch.workloads.sim`: the drop-in neuron-monitor (see cli.py)."""

import sys

from trnwatch.workloads.sim.cli import main

sys.exit(main())
