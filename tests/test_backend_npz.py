"""Arrays saved by name (`npuc run` outputs, `npuc inputs` skeletons) keep every name,
including the ones `np.savez(**arrays)` takes for its own parameters."""

from __future__ import annotations

import numpy as np

from npu_backend.runner import load_inputs, save_arrays


def test_every_name_round_trips(tmp_path):
    arrays = {
        "allow_pickle": np.arange(3, dtype=np.int8),
        "file": np.ones((2, 2), np.float32),
        "y": np.array(7, np.int32),
    }
    save_arrays(tmp_path / "a.npz", arrays)
    back = load_inputs(tmp_path / "a.npz")
    assert sorted(back) == sorted(arrays)
    for k, v in arrays.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)


def test_numpy_savez_would_drop_the_name():
    """The control: the bug `save_arrays` avoids is real in this numpy."""
    import io

    buf = io.BytesIO()
    np.savez(buf, **{"allow_pickle": np.zeros(2), "y": np.ones(1)})
    assert np.load(io.BytesIO(buf.getvalue())).files == ["y"]
