"""`zephyr.json_safe`: the one NaN/infinity converter of the ablation and ladder reports and the UI's API."""

import json
import math

import numpy as np

from zephyr.json_safe import json_safe


def test_nan_is_null_and_infinities_are_strings_or_null():
    value = {"a": [1.0, math.nan, math.inf, -math.inf], 2: (np.float64("inf"), "x", None, 3)}
    assert json_safe(value) == {"a": [1.0, None, "inf", "-inf"], "2": ["inf", "x", None, 3]}
    assert json_safe(value, infinity="null") == {"a": [1.0, None, None, None], "2": [None, "x", None, 3]}
    json.dumps(json_safe(value), allow_nan=False)  # strict JSON now holds it


def test_leaf_converts_other_values_first():
    def leaf(v):
        return v.item() if isinstance(v, np.generic) else v

    assert json_safe([np.float32("inf"), np.int64(4)], leaf=leaf) == ["inf", 4]
    assert type(json_safe([np.int64(4)])[0]) is np.int64  # without a leaf, other values are returned as they are
