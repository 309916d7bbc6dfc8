"""Small hyperparameter sweeps: a grid or a seeded random sample of settings, each trial a normal run.

A sweep is a folder under the runs root, `<date>-<time>-sweep-<task>/`, holding `sweep.json` (the plan and
each trial's state) and one subfolder per trial (`trial-01-lr=0.001-batch_size=64`), each an ordinary run
folder with its run.json, so `amp-console runs` and the window's history list the trials as
"<sweep>/<trial>" (core.engine.run_index.find_runs). Trials run one after another in this process (the
trainer's own `train`), or N at a time on N device slots, each in its own training process
(`run_sweep(..., devices=[...])`, core.lab.sweep.parallel); early stopping, best checkpoints and everything else
a run does apply per trial.

The API (plain functions, no Qt; torch is imported only when a trial runs):

- `plan_trials(base, grid=..., ranges=..., samples=..., seed=...)` -> [Trial]: every combination of a grid, or
  `samples` seeded random draws over ranges, each checked with RunConfig.validate() before anything runs
  (a bad value is a ConfigError whose field is "--grid KEY" or "--range KEY").
- `create_sweep(base, trials, root=...)` -> the new sweep folder, with sweep.json saying every trial is pending.
- `run_sweep(folder, progress=None, control=None, devices=None)` -> SweepResult: runs what is not done
  (completed and failed trials are skipped, a stopped or interrupted trial resumes from its checkpoint, pending
  ones run; `devices`: one trial per listed device at a time, each in a child process). A stop (control.stop(),
  which the CLI's signal handlers call) stops the running trial(s) with a checkpoint and leaves the rest pending.
  A trial that fails (setup included) is recorded as failed with its message; the sweep goes on.
  `progress(obj)` gets SweepStarted, TrialStarted, TrialEvent (each trainer event of the trial), TrialEnded and
  SweepEnded; a GUI runs it on a BackgroundJob.
- `sweep_table(folder, sort=None)` -> rows (dicts, see `_row`): one per trial, sorted by the best value of the
  monitored metric (respecting min/max), or by `sort` (a column or parameter name). `best_row(rows)`.
- `continue_settings(row, factor=2.0)` -> (checkpoint, changes): how to "train this one longer" (resume the
  trial's checkpoint.pt with `changes` applied, e.g. {"max_steps": 200}); `continue_config(row)` -> (RunConfig,
  checkpoint) ready for the trainer; `train_longer_command(row)` as text.
- `load_sweep(folder)`, `find_sweeps(root)`.

sweep.json (version 1) is rewritten atomically (core.files) when a trial starts and ends:
  {"version": 1, "kind": "amp-console-sweep", "name", "created", "updated", "status", "task", "metric",
   "mode" ("min" | "max"), "method" ("grid" | "random"), "devices" (the device slots it last ran on, [] for one
   trial at a time in-process), "axes": [{"key", "target" ("field" | "option"),
   "values": [...]} for a grid, or {"key", "target", "low", "high", "log", "integer"} / {"key", "target",
   "choices"} for random], "samples", "seed", "base_config" (RunConfig.to_dict(), out_dir empty),
   "trials": [{"index", "name", "folder" (relative to the sweep folder), "params" {key: value}, "status"
   ("pending" | "running" | "completed" | "stopped" | "failed"), "message", "run_id", "started", "ended",
   "attempts", "device" (where it last ran)}]}
`load_sweep` reads a "running" trial (or sweep) that no live process holds as "interrupted".

The package, a module per concern, each importing only those before it: `plan` (axes and trials), `record`
(sweep.json read as a checked record), `folder` (creating, writing, locking, loading, finding), `trials` (the
events and each trial's bookkeeping), `table` (results), `parallel` (trials N at a time in child processes) and
`runner` (`run_sweep`). Everything public is importable from `core.lab.sweep`.
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
