"""The hosts' runs in the run history (docs/remote.md): each known host is asked for its runs on a background job, and
they are rows named `HOST:RUN`; a host not answered, unreachable or without runs is one row saying so. Preview,
Evaluate, Export and Overlay on a host's run fetch it first into `<runs root>/.hosts/HOST/RUN/` and act on that copy.
The history panel calls `rows()`, `update_buttons()`, `fetch_first()` and `shutdown()`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from app.panels.history_scan import fingerprint
from app.run.jobs import JobRunner
from core.text import printable, size

LIST_EVERY_SECONDS = 15.0  # a host's runs are asked for again at a scan this long after its last answer
LIST_SILENCE_SECONDS = 30.0  # a host that says nothing for this long is shown as not answering


@dataclass
class Listing:
    root: object  # the local runs root the rows' copy folders are under
    rows: list[dict]
    when: float


def host_row(dest: str, status: str, note: str, root) -> dict:
    """The one row of a host whose runs are not shown (not answered yet, unreachable, none there)."""
    from core.remote.fetch import copies_root

    return {
        "version": 0,
        "id": f"host:{dest}",
        "name": f"{dest}:",
        "status": status,
        "note": note,
        "message": note,
        "host": dest,
        "host_row": True,
        "folder": str(copies_root(root, dest)),
    }


class RemoteHistory(QObject):
    """The hosts' side of a HistoryPanel (`panel`): its hosts are a HostList given by set_hosts."""

    fetchProgress = Signal(object)  # emitted on the fetching job's thread: queued to the GUI thread

    def __init__(self, panel):
        super().__init__(panel)
        self.panel = panel
        self.hosts = None  # app.panels.hosts.HostList
        self._listings: dict[str, Listing] = {}
        self._asking: set[str] = set()
        self.jobs = JobRunner(self)
        self._stop = threading.Event()  # set at shutdown: the ssh calls under way end
        self.fetchProgress.connect(self._progress)
        self._fetching = False
        self._fetched: set[str] = set()  # copies fetched for the action that asked, not yet acted on

    def set_hosts(self, hosts) -> None:
        self.hosts = hosts
        hosts.savedChanged.connect(self._hosts_changed)
        self.panel.refresh()

    def _dests(self) -> list[str]:
        return [entry.dest for entry in self.hosts.entries()] if self.hosts is not None else []

    def _hosts_changed(self, _saved=None) -> None:
        dests = set(self._dests())
        for dest in list(self._listings):
            if dest not in dests:
                del self._listings[dest]
        self.panel.refresh()

    # ------------------------------------------------------------------ listing
    def rows(self) -> list[dict]:
        """The hosts' rows as last listed; a stale listing is asked for again off the GUI thread, and the panel rescans
        when the answer changes a row."""
        root = self.panel.root
        rows: list[dict] = []
        for dest in self._dests():
            listing = self._listings.get(dest)
            current = listing is not None and listing.root == root
            if not current or time.monotonic() - listing.when > LIST_EVERY_SECONDS:
                self._ask(dest, root)
            if current:
                rows += [dict(row) for row in listing.rows]
            else:
                rows.append(host_row(dest, "listing…", f"asking {dest} for its runs", root))
        return rows

    def _ask(self, dest: str, root) -> None:
        if dest in self._asking or root is None:
            return
        self._asking.add(dest)
        host = self.hosts.host(dest)

        def ask():
            from core.remote.fetch import list_host_runs

            listed = list_host_runs(host, root, stop=self._stop.is_set, silence=LIST_SILENCE_SECONDS)
            if not listed.runs:
                return [host_row(dest, "no runs", f"no runs in {listed.root} on {dest}", root)]
            return listed.runs

        self.jobs.submit(
            ask,
            lambda rows: self._answered(dest, root, rows),
            lambda message, _details: self._answered(dest, root, [host_row(dest, "unreachable", message, root)]),
        )

    def _answered(self, dest: str, root, rows: list[dict]) -> None:
        self._asking.discard(dest)
        if dest not in self._dests():
            return
        before = self._listings.get(dest)
        self._listings[dest] = Listing(root, rows, time.monotonic())
        if (
            before is None
            or before.root != root
            or [fingerprint(r) for r in before.rows] != [fingerprint(r) for r in rows]
        ):
            self.panel.refresh()

    def shutdown(self) -> None:
        """Stop every listing and fetch (their ssh calls are ended) and wait for them."""
        self._stop.set()
        self.jobs.shutdown()

    # ------------------------------------------------------------------ the panel's buttons
    def update_buttons(self, runs: list[dict]) -> None:
        """After the panel's own: a host's run can be tried, evaluated and exported (fetched first), not resumed,
        deleted, revealed or annotated."""
        if not any(run.get("host") for run in runs):
            return
        panel = self.panel
        usable = [run for run in runs if not run.get("host_row")]
        one = len(runs) == 1 and len(usable) == 1 and usable[0].get("host")
        fetchable = bool(one and usable[0].get("remote_checkpoints")) and not self._fetching
        panel.previewButton.setEnabled(fetchable)
        panel.exportButton.setEnabled(fetchable)
        panel.evaluateButton.setEnabled(fetchable and panel._evaluating is None)
        for button in (panel.resumeButton, panel.deleteButton, panel.revealButton, panel.noteSaveButton):
            button.setEnabled(False)
        panel.noteEdit.setEnabled(False)
        panel.overlayButton.setEnabled(bool(usable) and len(usable) == len(runs) and not self._fetching)
        panel.compareButton.setEnabled(len(usable) >= 2 and len(usable) == len(runs))

    # ------------------------------------------------------------------ fetching
    def fetch_first(self, runs: list[dict], again: Callable[[], None], checkpoint: bool = True) -> bool:
        """True when the action on `runs` waits for their copies: they are fetched and `again()` is called once they are
        in, if still selected. False when there is nothing to fetch."""
        remote = [run for run in runs if run.get("host") and not run.get("host_row")]
        if not remote:
            return False
        folders = {str(run["folder"]) for run in remote}
        if folders <= self._fetched:
            self._fetched -= folders
            return False
        panel = self.panel
        if self._fetching:
            panel.statusLabel.setText("Still fetching a run from a host; try again once it is in")
            return True
        wanted = [(self.hosts.host(run["host"]), str(run["remote_folder"]), str(run["name"])) for run in remote]
        root = panel.root

        def fetch():
            from core.remote.fetch import fetch_run

            return [
                fetch_run(
                    host,
                    folder,
                    root,
                    checkpoint=checkpoint,
                    on_progress=lambda d, t, f, name=name: self.fetchProgress.emit((name, d, t, f)),
                    stop=self._stop.is_set,
                )
                for host, folder, name in wanted
            ]

        def fetched(results) -> None:
            self._fetching = False
            sent = sum(r.bytes_sent for r in results)
            files = sum(len(r.sent) for r in results)
            names = ", ".join(printable(name) for _h, _f, name in wanted)
            panel.statusLabel.setText(
                f"Fetched {names}: {files} file(s), {size(sent) if sent else '0 B'}"
                + (" (the rest was here already)" if any(r.kept for r in results) else "")
            )
            self._fetched |= folders
            if {str(r.get("folder")) for r in panel.selected_runs()} >= folders:
                again()
            self._fetched -= folders
            panel._update_buttons()

        def failed(message: str, _details: str) -> None:
            self._fetching = False
            panel.statusLabel.setText(f"Could not fetch {printable(wanted[0][2])}: {message}")
            panel._update_buttons()

        panel.statusLabel.setText(f"Fetching {printable(wanted[0][2])}…")
        self._fetching = True
        self.jobs.submit(fetch, fetched, failed)
        panel._update_buttons()
        return True

    def _progress(self, report) -> None:
        name, done, total, file = report
        share = f" ({100 * done // total}%)" if total else ""
        self.panel.statusLabel.setText(
            f"Fetching {printable(name)}: {printable(file)}, "
            f"{size(done) if done else '0 B'} of {size(total) if total else '0 B'}{share}"
        )
