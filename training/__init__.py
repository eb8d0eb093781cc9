"""XTC training tool: sweep caps, fit the log-cap model, design the controller, write a model file.

Modules: :mod:`training.sweep` (the CSV schema), :mod:`training.collect` (sweeps on a host),
:mod:`training.hosts` (sim, libvirt and cgroup hosts from the daemon's adapters),
:mod:`training.fit` (threshold, regression, R^2), :mod:`training.analysis` (gains, step
response, mismatch margins, cap_min, model file), :mod:`training.plots`,
:mod:`training.pipeline` (all of it in one call, the report), :mod:`training.synth`
(sweeps generated from a model) and :mod:`training.cli` (``xtc train``).
"""

from training.fit import FitResult, fit_sweep, fit_sweeps, find_cap_threshold
from training.pipeline import Training, train_from_sweep
from training.sweep import Sample, Sweep, SweepError, TrainingError, parse_sweep_csv, read_sweep_csv, write_sweep_csv

__all__ = [
    "FitResult", "fit_sweep", "fit_sweeps", "find_cap_threshold", "Training", "train_from_sweep",
    "Sample", "Sweep", "SweepError", "TrainingError", "parse_sweep_csv", "read_sweep_csv", "write_sweep_csv",
]
