"""Small hyperparameter sweeps: a grid or a seeded random sample of settings, each trial a normal run in the sweep's
folder under the runs root (`<date>-<time>-sweep-<task>/trial-01-lr=0.001/`), run one after another in this process
or N at a time on device slots (core.lab.sweep.parallel). See docs/tuning.md.

    plan_trials(base, grid=..., ranges=..., samples=..., seed=...) -> [Trial]   every trial validated first
    create_sweep(base, trials, root=...) -> folder                              sweep.json: all pending
    run_sweep(folder, progress=None, control=None, devices=None) -> SweepResult what is not done; stop/resume
    sweep_table(folder, sort=None) -> rows; best_row(rows); continue_config(row) "train this one longer"

The modules, each importing only those before it: plan, record, folder, trials, table, parallel, runner.
"""

from core.lab.sweep.folder import (
    LOCK_FILE,
    SWEEP_VERSION,
    create_sweep,
    find_sweeps,
    load_sweep,
    new_sweep_folder,
    sweep_in_use,
    write_sweep,
)
from core.lab.sweep.plan import (
    MAX_TRIALS,
    NOT_SWEPT,
    OPTION_PREFIX,
    Axis,
    Trial,
    apply_params,
    grid_axis,
    parse_value,
    plan_trials,
    range_axis,
    resolve_key,
    short_value,
    trial_name,
)
from core.lab.sweep.record import KIND, SWEEP_FILE, finished_run, read_sweep
from core.lab.sweep.runner import DONE, _SweepLock, run_sweep
from core.lab.sweep.table import (
    COLUMNS,
    best_row,
    continue_config,
    continue_settings,
    sort_rows,
    sweep_table,
    train_longer_command,
)
from core.lab.sweep.trials import (
    SweepEnded,
    SweepEvent,
    SweepResult,
    SweepStarted,
    TrialEnded,
    TrialEvent,
    TrialStarted,
    begin_trial,
    end_trial,
    note_trial_folder,
    trial_config,
)

__all__ = [
    "COLUMNS",
    "DONE",
    "KIND",
    "LOCK_FILE",
    "MAX_TRIALS",
    "NOT_SWEPT",
    "OPTION_PREFIX",
    "SWEEP_FILE",
    "SWEEP_VERSION",
    "Axis",
    "SweepEnded",
    "SweepEvent",
    "SweepResult",
    "SweepStarted",
    "Trial",
    "TrialEnded",
    "TrialEvent",
    "TrialStarted",
    "_SweepLock",
    "apply_params",
    "begin_trial",
    "best_row",
    "continue_config",
    "continue_settings",
    "create_sweep",
    "end_trial",
    "find_sweeps",
    "finished_run",
    "grid_axis",
    "load_sweep",
    "new_sweep_folder",
    "note_trial_folder",
    "parse_value",
    "plan_trials",
    "range_axis",
    "read_sweep",
    "resolve_key",
    "run_sweep",
    "short_value",
    "sort_rows",
    "sweep_in_use",
    "sweep_table",
    "train_longer_command",
    "trial_config",
    "trial_name",
    "write_sweep",
]
