"""Small hyperparameter sweeps: a grid or a seeded random sample of settings, each trial a normal run in the sweep's
folder under the runs root (`<date>-<time>-sweep-<task>/trial-01-lr=0.001/`), run one after another in this process
or N at a time on device slots (core.lab.sweep.parallel). See docs/tuning.md.

    plan_trials(base, grid=..., ranges=..., samples=..., seed=...) -> [Trial]   every trial validated first
    create_sweep(base, trials, root=...) -> folder                              sweep.json: all pending
    run_sweep(folder, progress=None, control=None, devices=None) -> SweepResult what is not done; stop/resume
    sweep_table(folder, sort=None) -> rows; best_row(rows); continue_config(row) "train this one longer"

The modules, each importing only those before it: plan, record, folder, trials, table, parallel, runner.
"""

from core.lab.sweep.folder import LOCK_FILE, create_sweep, load_sweep, sweep_in_use
from core.lab.sweep.plan import grid_axis, plan_trials, range_axis, short_value
from core.lab.sweep.runner import _SweepLock, run_sweep
from core.lab.sweep.table import best_row, continue_config, sort_rows, sweep_table, train_longer_command
from core.lab.sweep.trials import SweepEnded, SweepStarted, TrialEnded, TrialEvent, TrialStarted

__all__ = [
    "LOCK_FILE",
    "SweepEnded",
    "SweepStarted",
    "TrialEnded",
    "TrialEvent",
    "TrialStarted",
    "_SweepLock",
    "best_row",
    "continue_config",
    "create_sweep",
    "grid_axis",
    "load_sweep",
    "plan_trials",
    "range_axis",
    "run_sweep",
    "short_value",
    "sort_rows",
    "sweep_in_use",
    "sweep_table",
    "train_longer_command",
]
