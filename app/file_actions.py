"""File menu: the form as TOML, presets, resume from a checkpoint, export one (a serving folder, core.runs.export, or
checkpoint files); Run → Copy as command / TOML. Checkpoints are read and written on a JobRunner thread."""

from __future__ import annotations

import contextlib
import re
import tempfile
from pathlib import Path

from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMenu

from app.assets import icon, presets
from core.config import RunConfig, run_command
from core.errors import AmpConsoleError, ConfigError

EXPORT_SUFFIXES = (".pt", ".safetensors", ".json")  # what export_checkpoint writes
# The save dialog's file types: checkpoint files (the default), then core.runs.export's serving folders.
CHECKPOINT_FILTER = "Checkpoint files: .pt, .safetensors and .json (*.pt *.safetensors)"
SERVING_FILTERS = {
    "Serving folder: torch.export program, plain torch (*.pt2)": "program",
    "Serving folder: ONNX, onnxruntime (*.onnx)": "onnx",
    "Serving folder: safetensors weights (*.safetensors)": "safetensors",
}
SERVING_SUFFIXES = (".pt2", ".onnx", ".safetensors", ".pt", ".json")
ANY_FORMAT = "any"  # ask_export's save dialog offers every file type above
EXPORT_MENU = {  # File → Export: each format its own entry, its save dialog offering that type alone
    "program": "&Serving folder: torch.export program + serve.py…",
    "onnx": "Serving folder: &ONNX + serve.py…",
    "safetensors": "Serving folder: safe&tensors weights + serve.py…",
    None: "&Checkpoint files (.pt, .safetensors, .json)…",
}
BEST_NAME = re.compile(r"best(?:-step(\d+))?\.pt")  # core.engine.early_stopping: best.pt, best-step<N>.pt
RUN_NAME = re.compile(r"\d{8}-\d{6}-")  # core.engine.run_record.new_run_folder: <date>-<time>-<task>-<precision>
OTHER_LABEL = "Another checkpoint…"
OTHER = object()  # choose_checkpoint's answer for OTHER_LABEL


def checkpoint_choices(source: str) -> list[tuple[str, str]]:
    """What File → Export can export of the run `source` belongs to, as (label, path), the last checkpoint first: "Last
    (step N)", "Best (step M, accuracy 0.91)". `source` itself is always listed."""
    from core.engine.early_stopping import format_value
    from core.engine.run_record import load_record

    path = Path(source).expanduser()
    folder = path if path.is_dir() else path.parent
    record = load_record(folder) or {}  # its fields' types checked
    checkpoints, best = record.get("checkpoints") or {}, record.get("best") or {}

    def step_of(which: str, file: Path) -> int | None:
        entry = checkpoints.get(which) or {}
        if entry.get("step") is not None and Path(entry.get("path") or "").name == file.name:
            return entry["step"]
        match = BEST_NAME.fullmatch(file.name)
        return int(match.group(1)) if match and match.group(1) else None

    last = folder / "checkpoint.pt"
    if not path.is_dir() and not BEST_NAME.fullmatch(path.name):
        last = path  # the checkpoint asked for (e.g. a run's checkpoint.pt, whatever its name)
    choices: list[tuple[str, str]] = []
    if last.is_file():
        step = step_of("last", last)
        choices.append((f"Last (step {step:,})" if step is not None else f"Last ({last.name})", str(last)))
    bests = []
    with contextlib.suppress(OSError):
        bests = [f for f in folder.iterdir() if BEST_NAME.fullmatch(f.name) and f.is_file()]
    named = Path((checkpoints.get("best") or {}).get("path") or "").name
    bests.sort(key=lambda f: (f.name != named, -(step_of("best", f) or 0)))  # run.json's best first, then latest
    for file in bests:
        step = step_of("best", file)
        parts = [f"step {step:,}" if step is not None else file.name]
        if step is not None and best.get("step") == step and best.get("value") is not None:
            parts.append(f"{best.get('name')} {format_value(best['value'])}")
        choices.append((f"Best ({', '.join(parts)})", str(file)))
    if not path.is_dir() and str(path) not in {c[1] for c in choices}:
        choices.insert(0, (path.name, str(path)))
    return choices


class FileActions:
    """The File menu's actions, bound to a MainWindow."""

    def __init__(self, window):
        self.window = window
        self.open_action = QAction(
            icon("open"), "&Open settings…", window, shortcut=QKeySequence.StandardKey.Open, triggered=self._ask_open
        )
        self.save_action = QAction(
            icon("save"), "&Save settings as…", window, shortcut=QKeySequence.StandardKey.Save, triggered=self._ask_save
        )
        self.resume_action = QAction(
            icon("resume"), "&Resume from checkpoint…", window, shortcut="Ctrl+R", triggered=self._ask_resume
        )
        self.export_action = QAction(
            icon("export"), "&Any format (chosen in the save dialog)…", window, shortcut="Ctrl+E"
        )
        self.export_action.triggered.connect(lambda: self.ask_export())
        self.export_menu = QMenu("&Export", window, icon=icon("export"))
        self.export_actions = {fmt: self.export_menu.addAction(text) for fmt, text in EXPORT_MENU.items()}
        for fmt, action in self.export_actions.items():
            action.triggered.connect(lambda _=False, f=fmt: self.ask_export(fmt=f))
        self.export_menu.addSeparator()
        self.export_menu.addAction(self.export_action)
        self.copy_actions = [
            QAction(f"Copy as &{what}", window, triggered=lambda _=False, w=what: self.copy_run(w))
            for what in ("command", "TOML")
        ]
        self.presets_menu = QMenu("&Presets", window)
        for name, text in presets().items():
            self.presets_menu.addAction(name, lambda t=text, n=name: self.load_toml_text(t, n))

    def add_to_menu(self, menu: QMenu) -> None:
        menu.addAction(self.open_action)
        menu.addAction(self.save_action)
        menu.addMenu(self.presets_menu)
        menu.addSeparator()
        menu.addAction(self.resume_action)
        menu.addMenu(self.export_menu)

    def update_enabled(self, running: bool, busy: bool) -> None:
        for action in (self.open_action, self.resume_action):
            action.setEnabled(not running and not busy)
        self.presets_menu.setEnabled(not running)
        self.export_menu.setEnabled(not busy)
        for action in (self.export_action, *self.export_actions.values()):
            action.setEnabled(not busy)
        for action in self.copy_actions:
            action.setEnabled(self.window.engine_ready)

    def load_toml(self, path: str) -> bool:
        try:
            config = RunConfig.load_toml(path)
        except ConfigError as exc:
            self.window.show_error(f"Could not load settings: {exc}")
            return False
        self.window.apply_config(config)
        self.window.show_message(f"Loaded settings from {path}")
        self.window.set_settings_name(Path(path).stem)
        return True

    def load_toml_text(self, text: str, name: str) -> bool:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"{name}.toml"
            path.write_text(text, encoding="utf-8")
            return self.load_toml(str(path))

    def save_toml(self, path: str) -> bool:
        try:
            self.window.setupPanel.config().save_toml(path)
        except (AmpConsoleError, OSError) as exc:
            self.window.show_error(f"Could not save settings: {exc}")
            return False
        self.window.show_message(f"Saved settings to {path}")
        self.window.set_settings_name(Path(path).stem)
        return True

    def run_command(self) -> str:
        """The form's run as a terminal command (core.config.run_command); on the selected host, `remote start`."""
        from core.remote.ssh import Host

        window, dest = self.window, self.window.devicesPanel.current_host() or ""
        command = window.devicesPanel.hosts.host(dest).command if dest else ""
        command = "" if dest and command == Host(dest).command else command
        root, processes = window.window_settings.runs_root(), window.setupPanel.processes()
        return run_command(window.setupPanel.config(), dest, processes, root, command)

    def copy_run(self, what: str) -> str:
        """Run → Copy as command / TOML: the form's run to the clipboard, as the status bar says; the text copied."""
        try:
            text = self.run_command() if what == "command" else self.window.setupPanel.config().to_toml()
        except ConfigError as exc:
            self.window.show_error(f"Could not copy the settings: {exc}")
            return ""
        QGuiApplication.clipboard().setText(text)
        line = text.strip().splitlines()[-1] if what == "command" else f"{len(text.splitlines())} lines"
        self.window.show_message(f"Copied as {what} to the clipboard: {line}", "status-ok")
        return text

    def _ask_open(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.window, "Open settings", "", "TOML (*.toml);;All files (*)")
        if path:
            self.load_toml(path)

    def _ask_save(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.window, "Save settings", "run.toml", "TOML (*.toml)")
        if path:
            self.save_toml(path if path.endswith(".toml") else f"{path}.toml")

    def resume(self, path: str) -> None:
        """Read the checkpoint's config (background thread), show it in the form, then continue the run."""
        window = self.window
        window.show_message(f"Reading {path}…")

        def loaded(config: dict) -> None:
            try:
                run_config = RunConfig.from_dict(config, source=path)
            except ConfigError as exc:
                window.show_error(f"Cannot resume from {path}: {exc}")
                return
            window.apply_config(run_config)
            window.logPanel.log(f"Resuming from {path}")
            if not window.start_run(resume_from=path):
                problems = "; ".join(f"{k}: {v}" for k, v in window.setupPanel.errors().items())
                window.show_error(f"Cannot resume from {path}: {problems or 'a run is in progress'}")

        from core.engine.checkpoints import load_checkpoint

        window.jobs.submit(
            lambda: load_checkpoint(path)["config"],
            loaded,
            lambda message, details: window.show_error(f"Cannot resume: {message}", details),
        )

    def export(self, source: str, destination: str, fmt: str | None = None) -> None:
        """Off the GUI thread, a task file's in a child process (core.runs.predictor_child.call_once, time-limited): <destination>.pt,
        .safetensors and .json (export_checkpoint), or with `fmt` the serving folder `destination` (core.runs.export,
        verified: its line has the max abs difference); what was written goes to the status bar and the log."""
        from core.runs.predictor_child import call_once

        window = self.window
        verify = f" as {fmt} (then loading it back to verify)" if fmt else ""
        window.show_message(f"Exporting {source}{verify}…")

        def done(lines: list[str]) -> None:
            window.show_message(lines[0], "status-ok")
            window.logPanel.log(lines[1])

        window.jobs.submit(
            lambda: call_once("export", source, destination, fmt),
            done,
            lambda message, details: window.show_error(f"Export failed: {message}", details),
        )

    def _ask_resume(self) -> None:
        start = str(Path(self.window.last_checkpoint).parent) if self.window.last_checkpoint else ""
        path = self._pick_checkpoint("Resume from checkpoint", start)
        if path:
            self.resume(path)

    def _checkpoint_folder_hint(self) -> str:
        """Where to look for a checkpoint before any run: the form's output folder (or the runs root) if it exists."""
        try:
            out_dir = self.window.setupPanel.config().out_dir
            folder = Path(out_dir).expanduser().resolve() if out_dir else self.window.runs_root()
        except Exception:
            return ""
        for candidate in (folder, folder.parent):
            if candidate.is_dir():
                return str(candidate)
        return ""

    def export_default(self, source: str) -> tuple[str, Path | None]:
        """The path the export dialog proposes: `<run folder>/export/model` (made if needed), `model-2`, ... when taken.
        Returns (path, the folder if it was created here, to remove if the user goes elsewhere)."""
        run_folder = Path(source).expanduser().resolve().parent
        folder = run_folder / "export"
        created = None
        if not folder.is_dir():
            try:
                folder.mkdir(parents=True)
                created = folder
            except OSError:  # a read-only run folder: propose the run folder itself
                folder = run_folder
        name, n = "model", 1
        while (folder / name).exists() or any((folder / name).with_suffix(s).exists() for s in EXPORT_SUFFIXES):
            n += 1
            name = f"model-{n}"
        return str(folder / name), created

    def choose_checkpoint(
        self, choices: list[tuple[str, str]], preferred: str | None = None, other: bool = False
    ) -> str | None:
        """Ask which of `choices` [(label, path)] to export; None when cancelled. One choice is taken without asking,
        unless `other` adds "Another checkpoint…" (which returns OTHER)."""
        if len(choices) == 1 and not other:
            return choices[0][1]
        labels = [label for label, _path in choices] + ([OTHER_LABEL] if other else [])
        current = next((i for i, (_label, path) in enumerate(choices) if path == preferred), 0)
        folder = Path(choices[0][1]).resolve().parent.name
        question = "has a best checkpoint as well as its last one" if len(choices) > 1 else "is the latest run"
        label, ok = QInputDialog.getItem(
            self.window,
            "Export checkpoint",
            f"The run {folder} {question}.\nWhich one to export?",
            labels,
            current,
            False,
        )
        if not ok or label not in labels:
            return None
        return OTHER if label == OTHER_LABEL else choices[labels.index(label)][1]

    def latest_run_checkpoint(self) -> str | None:
        """The newest run folder under the runs root holding a checkpoint (names sort by start time), or None."""
        root = self.window.runs_root()
        with contextlib.suppress(OSError):
            runs = sorted((f for f in root.iterdir() if RUN_NAME.match(f.name) and f.is_dir()), reverse=True)
            for folder in runs[:50]:  # a sweep folder or a run that never saved: look at the next one
                if (folder / "checkpoint.pt").is_file() or any(BEST_NAME.fullmatch(f.name) for f in folder.iterdir()):
                    return str(folder)
        return None

    def ask_export(self, source: str | None = None, fmt: str | None = ANY_FORMAT) -> None:
        """File → Export: export `source` (a checkpoint or a run folder); without one the current run, else the latest
        run, its best checkpoint offered first. Then ask where to write, as `fmt` (EXPORT_MENU's; ANY_FORMAT: the type
        chosen in the save dialog). The run history's Export connects here."""
        offered = source is None
        source = source or self.window.last_checkpoint
        if not source or not Path(source).exists():
            source = self.latest_run_checkpoint()
        if not source:
            source = self._pick_checkpoint()
            offered = False
            if not source:
                return
        choices = checkpoint_choices(source)
        if not choices:
            self.window.show_error(f"No checkpoint to export in {source}")
            return
        best = next((path for label, path in choices if label.startswith("Best")), None)
        preferred = best if offered and best else str(Path(source).expanduser())
        source = self.choose_checkpoint(choices, preferred=preferred, other=offered)
        if source == OTHER:
            source = self._pick_checkpoint()
            if source:
                choices = checkpoint_choices(source)
                source = self.choose_checkpoint(choices, preferred=str(Path(source).expanduser())) if choices else None
        if not source:
            return
        default, created = self.export_default(source)
        run_name = Path(source).resolve().parent.name
        kinds = [k for k in (CHECKPOINT_FILTER, *SERVING_FILTERS) if fmt in (ANY_FORMAT, SERVING_FILTERS.get(k))]
        destination, chosen_filter = QFileDialog.getSaveFileName(
            self.window, f"Export {Path(source).name} of {run_name}", default, ";;".join(kinds)
        )
        fmt = SERVING_FILTERS.get(chosen_filter, fmt if fmt != ANY_FORMAT else None)  # None: checkpoint files
        chosen = None
        if destination:
            chosen = Path(destination)
            if chosen.suffix in (SERVING_SUFFIXES if fmt else EXPORT_SUFFIXES):  # "model.pt" names model.*
                chosen = chosen.with_suffix("")
        if created is not None and (chosen is None or chosen.resolve().parent != created):
            with contextlib.suppress(OSError):
                created.rmdir()  # the folder made for the dialog stays only if the export goes there
        if chosen is not None:
            self.export(source, str(chosen), fmt)

    def _pick_checkpoint(self, title: str = "Checkpoint to export", start: str | None = None) -> str:
        start = self._checkpoint_folder_hint() if start is None else start
        return QFileDialog.getOpenFileName(self.window, title, start, "Checkpoints (*.pt);;All files (*)")[0]
