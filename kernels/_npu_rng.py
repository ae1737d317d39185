"""Random numbers of the emulated ``torch.npu``: forwarded to ``torch.cuda`` with a CUDA backing.

With a CPU backing these act on ``torch.default_generator`` directly: ``torch.manual_seed`` itself
calls ``torch.cuda.manual_seed_all``, which is this module under ``emulate_cuda``.
"""

from __future__ import annotations

from typing import Any, List

import torch


class RngMethods:
    """The RNG functions of ``EmulatedDeviceModule`` (which sets ``_cuda`` and ``_index``)."""

    _cuda: bool

    def manual_seed(self, seed: int) -> None:
        if self._cuda:
            torch.cuda.manual_seed(seed)
        else:
            torch.default_generator.manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        if self._cuda:
            torch.cuda.manual_seed_all(seed)
        else:
            torch.default_generator.manual_seed(int(seed))

    def seed(self) -> None:
        if self._cuda:
            torch.cuda.seed()
        else:
            torch.default_generator.seed()

    def seed_all(self) -> None:
        if self._cuda:
            torch.cuda.seed_all()
        else:
            torch.default_generator.seed()

    def initial_seed(self) -> int:
        return torch.cuda.initial_seed() if self._cuda else torch.default_generator.initial_seed()

    def get_rng_state(self, device: Any = "npu") -> torch.Tensor:
        return torch.cuda.get_rng_state(self._index(device)) if self._cuda else torch.default_generator.get_state()

    def set_rng_state(self, new_state: torch.Tensor, device: Any = "npu") -> None:
        if self._cuda:
            torch.cuda.set_rng_state(new_state, self._index(device))
        else:
            torch.default_generator.set_state(new_state)

    def get_rng_state_all(self) -> List[torch.Tensor]:
        return [self.get_rng_state(i) for i in range(self.device_count())]

    def set_rng_state_all(self, new_states: List[torch.Tensor]) -> None:
        for i, state in enumerate(new_states):
            self.set_rng_state(state, i)
