"""The window comes back where it was: a geometry this version saved is restored in the next window, and one
saved on a screen of another width (Qt's restoreGeometry refuses those) is fitted to this screen, silently."""

from __future__ import annotations

import struct

import pytest
from gui_helpers import UI_WAIT_MS
from PySide6.QtCore import QByteArray, QSettings

from app.window_settings import GEOMETRY_KEY

pytestmark = pytest.mark.timeout(60)
SCREEN_WIDTH_AT = 46  # bytes into QWidget.saveGeometry()'s record (version 3): the saving screen's width


def settings_notes(window) -> list[str]:
    return [line for line in window.logPanel.toPlainText().splitlines() if "Settings:" in line]


def saved_by(qtbot, make_window, store: QSettings, width: int, height: int) -> QByteArray:
    window = make_window(settings_store=store)
    window.resize(width, height)
    window.move(20, 30)
    qtbot.waitUntil(lambda: window.width() == width, timeout=UI_WAIT_MS)
    window.close()  # saves the settings, as quitting does
    return QSettings(store.fileName(), QSettings.Format.IniFormat).value(GEOMETRY_KEY)


def restored_size(window) -> tuple[int, int]:
    """The offscreen screen is 800 px wide, narrower than the window's minimum width: a restored width is
    fitted to the screen, then held at that minimum. The height (640, against the default 860) tells."""
    return window.width(), window.height()


def test_a_saved_geometry_comes_back_in_the_next_window(qtbot, make_window, settings):
    saved_by(qtbot, make_window, settings, 1240, 640)
    again = make_window(settings_store=QSettings(settings.fileName(), QSettings.Format.IniFormat))
    assert restored_size(again) == (max(again.minimumWidth(), 800), 640)
    assert not settings_notes(again)


def test_a_geometry_saved_on_another_screen_is_fitted_here_without_a_false_alarm(qtbot, make_window, settings):
    geometry = saved_by(qtbot, make_window, settings, 1240, 640)
    data = bytearray(geometry.data())
    screen = struct.unpack_from(">i", data, SCREEN_WIDTH_AT)[0]
    struct.pack_into(">i", data, SCREEN_WIDTH_AT, screen * 3)  # a screen three times as wide saved it
    store = QSettings(settings.fileName(), QSettings.Format.IniFormat)
    store.setValue(GEOMETRY_KEY, QByteArray(bytes(data)))
    store.sync()
    again = make_window(settings_store=QSettings(settings.fileName(), QSettings.Format.IniFormat))
    assert not again.restoreGeometry(QByteArray(bytes(data)))  # what Qt says of such a record
    assert restored_size(again) == (max(again.minimumWidth(), 800), 640)  # its size all the same, on this screen
    assert again.screen().availableGeometry().intersects(again.geometry())
    assert not any("geometry" in note for note in settings_notes(again)), settings_notes(again)
