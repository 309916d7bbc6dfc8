"""A run on a host looks remote: the devices list marks the host and its device while the run trains there."""

from __future__ import annotations

import pytest

from app.panels.hosts import HostEntry
from core.devices import DeviceInfo
from core.remote.client import HostInfo


@pytest.mark.timeout(60)
def test_the_hosts_device_is_highlighted_while_a_remote_run_is_on(window):
    panel = window.devicesPanel
    gpu = DeviceInfo(id="cuda:0", type="cuda", name="Box GPU", memory_total=2**34, precisions=("fp32", "bf16"))
    info = HostInfo(dest="box", version="1", devices=[gpu], runs_root="/runs", hostname="box")
    panel.hosts._entries["box"] = HostEntry("box", state="ready", info=info)
    panel.hosts.changed.emit()

    def marked() -> list[str]:
        items = [panel.list.item(row) for row in range(panel.list.count())]
        return [item.text().split("  ·  ")[0] for item in items if "training here" in item.text()]

    assert marked() == []
    panel.show_remote_run("box", "cuda:0")
    assert (
        marked() == ["box", "cuda:0"] and "A run is training here" in panel.list.item(panel.list.count() - 1).toolTip()
    )
    window._update_buttons()  # no run: the mark goes
    assert marked() == []
