"""core.devices' host memory figures come from psutil, one helper each, for every layer that needs them."""

from __future__ import annotations

import psutil
import torch

from core.devices import available_ram, cpu_info, memory_in_use, peak_resident_set, resident_set, total_ram
from core.tasks.base import free_bytes


def test_host_memory_is_read_through_psutil():
    assert total_ram() == psutil.virtual_memory().total and cpu_info().memory_total == total_ram()
    assert 0 < available_ram() <= total_ram()
    assert abs(free_bytes(torch.device("cpu")) - available_ram()) < total_ram() // 10  # the tasks' pre-check
    rss = resident_set()
    assert 0 < rss <= peak_resident_set() * 1.01 and memory_in_use(torch.device("cpu")) > 0
