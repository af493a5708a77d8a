"""Every preset of ``ldpdist reproduce``, one module per paper."""

from __future__ import annotations

from typing import Dict

from . import (compressive_privatization, context_aware, hadamard_response,
               sparse_estimation)
from .grid import Preset

PRESETS: Dict[str, Preset] = {**compressive_privatization.PRESETS, **hadamard_response.PRESETS,
                              **sparse_estimation.PRESETS, **context_aware.PRESETS}
