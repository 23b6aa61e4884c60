"""One image decoded as the loader decodes an image field, and the crop the
loader draws for a sample (docs/images.md).

The keyword arguments are the image keys of a field spec: ``size``, ``crop``,
``resize``, ``scale``, ``ratio``, ``flip``, ``layout``, ``max_pixels``.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _core

__all__ = ["decode_image", "crop_box"]


def _spec(kw: dict) -> dict:
    return {k: v for k, v in kw.items() if v is not None}


def decode_image(data: bytes, *, box: Optional[Sequence[float]] = None, seed: int = 0,
                 epoch: int = 0, key: str = "", **spec: Any) -> np.ndarray:
    """JPEG, PNG or WebP bytes to uint8 RGB ``[H, W, 3]`` (``[3, H, W]`` with
    ``layout="CHW"``).

    Without ``box`` the geometry is drawn from (seed, epoch, key) exactly as
    the loader draws it for that sample, so ``decode_image(jpg, key=k, **spec)``
    equals the loader's pixels for sample ``k``. ``box=(top, left, height,
    width[, flip])`` (torchvision's order) crops that box instead and resizes
    it to ``size`` (or keeps its size). Raises CorruptError for a bad image.
    """
    return _core.decode_image(bytes(data), _spec(spec), None if box is None else list(box),
                              seed, epoch, key)


def crop_box(width: int, height: int, *, seed: int = 0, epoch: int = 0, key: str = "",
             **spec: Any) -> Tuple[float, float, float, float, bool]:
    """The box ``(top, left, height, width, flip)`` the loader takes from a
    ``width`` x ``height`` image for the sample ``key`` (fractional for a
    center crop: the output's footprint on the source)."""
    return tuple(_core.image_crop_box(width, height, _spec(spec), seed, epoch, key))
