"""XTC training tool: sweep caps, fit the log-cap model, design the controller, write a model file.

Modules: :mod:`xtc.training.sweep` (the CSV schema), :mod:`xtc.training.collect` (sweeps on a host),
:mod:`xtc.training.hosts` (libvirt and cgroup sweep targets on the daemon's own host backends; the
simulated one is the testbed's ``xtc_lab.sim.train``),
:mod:`xtc.training.fit` (threshold, regression, R^2), :mod:`xtc.training.analysis` (gains, step
response, mismatch margins, cap_min, model file), :mod:`xtc.training.plots`,
:mod:`xtc.training.pipeline` (all of it in one call, the report), :mod:`xtc.training.synth`
(sweeps generated from a model) and :mod:`xtc.training.cli` (``xtc train``).
"""

from xtc.training.fit import FitResult, fit_sweep, fit_sweeps, find_cap_threshold
from xtc.training.pipeline import Training, train_from_sweep
from xtc.training.sweep import SweepSample, Sweep, SweepError, TrainingError, parse_sweep_csv, read_sweep_csv, write_sweep_csv

__all__ = [
    "FitResult", "fit_sweep", "fit_sweeps", "find_cap_threshold", "Training", "train_from_sweep",
    "SweepSample", "Sweep", "SweepError", "TrainingError", "parse_sweep_csv", "read_sweep_csv", "write_sweep_csv",
]
