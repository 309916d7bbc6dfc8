"""The run history's note editor: note.txt written off the GUI thread, never overwritten by a rescan that read
the folder before the write landed."""

from __future__ import annotations

from pathlib import Path

from core.engine.run_record import write_note
from core.text import printable


class RunNoteEditing:
    """HistoryPanel's note editing: `save_note`, `note_edited`, and the editor kept in step with the selection."""

    def _sync_note_editor(self, run: dict | None) -> None:
        """Show the selected run's note unless it is being edited; an unsaved edit is saved first."""
        folder = run.get("folder") if run else None
        note = printable((run or {}).get("note") or "", keep_newlines=True)  # read from note.txt
        self.noteEdit.setEnabled(folder is not None)
        if folder == self._note_folder and (self.note_edited or note == self._note_loaded):
            self._update_note_button()
            return
        if folder != self._note_folder and self.note_edited:
            self.save_note()
        self._note_folder, self._note_loaded = folder, note
        self.noteEdit.blockSignals(True)
        self.noteEdit.setPlainText(note)
        self.noteEdit.blockSignals(False)
        self._update_note_button()

    @property
    def note_edited(self) -> bool:
        return self._note_folder is not None and self.noteEdit.toPlainText().strip() != self._note_loaded

    def _update_note_button(self) -> None:
        self.noteSaveButton.setEnabled(self.note_edited)

    def save_note(self) -> None:
        """Write the editor's note to the run's note.txt off the GUI thread; shown in the table at once."""
        folder = self._note_folder
        if folder is None or not self.note_edited:
            return
        text = self.noteEdit.toPlainText().strip()
        name = Path(folder).name
        self._note_loaded = text
        self._update_note_button()
        previous = self._saved_notes.get(folder)
        before = self.model.note_of(folder)
        self._saved_notes[folder] = [text, None]  # being written: scans show this note
        self.model.set_note(folder, text)

        def saved(note: str) -> None:
            if self._saved_notes.get(folder, [None])[0] == text:
                self._saved_notes[folder][1] = self._scan_serial  # a scan started after now reads it from disk
            self._say(f"Saved the note of {name}" if note else f"Removed the note of {name}")

        def failed(message: str, _details: str) -> None:
            if self._saved_notes.get(folder, [None])[0] == text:
                if previous is None:
                    del self._saved_notes[folder]
                else:
                    self._saved_notes[folder] = previous
                self.model.set_note(folder, before)  # the table shows what is on disk again
            self._say(f"Could not save the note of {name}: {message}")
            if self._note_folder == folder and self.noteEdit.toPlainText().strip() == text:
                self._note_loaded = None  # still edited: Save stays on to try again
                self._update_note_button()

        self.jobs.submit(lambda: write_note(folder, text), saved, failed)
