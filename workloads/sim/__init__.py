"""The simulated Trn3 fleet: schema-faithful neuron-monitor reports with fault scenarios.

topology.py (fleet shapes, ASSUMPTIONS), scenarios.py (timeline, faults, ground-truth table),
chip.py / host.py (the numbers), fleet.py (SimHost: report JSON), ground_truth.py (exact per-chip
HBM and utilisation), monitor_config.py (neuron-monitor config), cli.py (the drop-in process).
"""
