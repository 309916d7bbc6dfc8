"""Plot buffers grow by doubling and hand out views, not copies."""

import numpy as np

from app.series import Series, SmoothedSeries


def test_series_grows_by_doubling():
    series = Series(capacity=4)
    for i in range(1000):
        series.append(i, i * 2.0)
    assert len(series) == 1000
    assert series.capacity == 1024
    assert np.array_equal(series.x, np.arange(1000))
    assert series.y[-1] == 1998.0
    assert series.y.base is not None  # a view of the buffer


def test_smoothed_series_is_bias_corrected():
    series = SmoothedSeries(weight=0.9)
    series.append(0, 5.0)
    assert series.last() == 5.0
    series.append(1, float("nan"))
    assert np.isnan(series.last())
    series.clear()
    assert len(series) == 0
