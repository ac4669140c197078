"""Reading a user's array for `sim formats --array`: a .npy file of real numbers, all finite."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from sim.core.errors import SimError


def numeric_array(path: Path) -> np.ndarray:
    """A .npy file of real numbers, all finite (a NaN would score as an infinite SQNR). np.save writes
    ml_dtypes' bfloat16 (most checkpoints' format) as a 2-byte void, `|V2`: such an array is read as bfloat16."""
    try:
        with open(path, "rb") as f:   # np.load reads a file without the .npy magic as a pickle and advises
            magic = f.read(6)         # allow_pickle=, wrong for a text file (a trial's finding)
    except OSError as exc:
        raise SimError(f"{path}: not a readable .npy array ({exc.strerror or exc})") from None
    if magic != b"\x93NUMPY" and not magic.startswith(b"PK"):   # .npy magic; a .npz is a zip archive
        raise SimError(f"{path}: not a .npy file (it lacks the NumPy header; write one with numpy.save)")
    try:
        x = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise SimError(f"{path}: not a readable .npy array ({(str(exc).splitlines() or [type(exc).__name__])[0]})") from None
    if not isinstance(x, np.ndarray):  # np.load gives an NpzFile for .npz archives
        raise SimError(f"{path}: a .npz archive; expected one .npy array")
    if x.dtype.kind == "V" and x.dtype.itemsize == 2 and x.dtype.fields is None:
        x = x.view(ml_dtypes.bfloat16)
    if x.dtype.kind not in "biuf" and x.dtype.name != "bfloat16":
        raise SimError(f"{path}: array of dtype {x.dtype}; expected real numbers (float32, float16, bfloat16, "
                       "integers): save it as one of those")
    if x.size == 0:
        raise SimError(f"{path}: empty array")
    x = x.astype(np.float64) if x.dtype.kind in "biu" or x.dtype.name == "bfloat16" else x
    if not np.isfinite(x).all():
        raise SimError(f"{path}: array holds NaN or infinite values; the error of a format is undefined there")
    return x
