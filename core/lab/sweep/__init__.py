"""Small hyperparameter sweeps (docs/tuning.md): a grid or a seeded random sample of settings (`plan_trials`, every
trial validated first), each trial a normal run in the sweep's folder under the runs root
(`<date>-<time>-sweep-<task>/trial-01-lr=0.001/`, `create_sweep`), run one after another in this process or N at a
time on device slots (`run_sweep`, stop and resume), and the results (`sweep_table`, `best_row`, `continue_config`).
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
