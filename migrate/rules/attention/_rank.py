"""How q, k and v of the rank the code gives them reach npu_fusion_attention, or why they cannot.

The fused call and its guard (``npu_glue.can_fuse``) take [B, N, S, D] tensors. Where the code fixes
the operands' rank (``rules._rank``) to something else, passing them as they are would give a guard
that never holds: a site counted as rewritten whose kernel never runs. Instead:

* 3-D ``[B*N, S, D]`` (heads merged into the batch: ``rearrange(x, "b n (h d) -> (b h) n d")``,
  ``x.view(b * h, n, d)``): each row of the merged batch is one head's attention, so the kernel
  gets ``q.unsqueeze(1)`` (``[B*N, 1, S, D]``, one head per batch row) and the result is squeezed
  back; a 3-D mask gets the same new dim, a 2-D one broadcasts as it is;
* 2-D ``[S, D]`` (one sequence, one head): ``q[None, None]``, the result ``[0, 0]``;
* any other fixed rank, or operands of different fixed ranks, or a mask whose rank the code does
  not fix next to 3-D operands: reported with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

from ...refusal import Refusal, blocked
from ...view.rank import rank
from ....opmap import plan

RANK_PLAN = plan("attention.rank")


@dataclass(frozen=True)
class Shaped:
    """q/k/v of rank ``rank`` (None: not fixed by the code, 4 assumed and checked at run time)."""

    rank: Optional[int] = None

    def operand(self, text: str) -> str:
        """q, k or v as [B, N, S, D]."""
        return {3: f"{text}.unsqueeze(1)", 2: f"{text}[None, None]"}.get(self.rank, text)

    def mask(self, text: str, value) -> Optional[str]:
        """A mask as it broadcasts to the [B, N, Sq, Skv] scores, or None when that is not known."""
        if self.rank != 3:
            return text
        mask_rank = rank(value)
        return {2: text, 3: f"{text}.unsqueeze(1)"}.get(mask_rank) if mask_rank is not None else None

    def heads(self, q: str) -> str:
        return f"{q}.shape[1]" if self.rank in (None, 4) else "1"

    @property
    def result(self) -> str:
        """What turns the kernel's [B, N, S, Dv] result back into the original's shape."""
        return {3: ".squeeze(1)", 2: "[0, 0]"}.get(self.rank, "")

    @property
    def described(self) -> str:
        return {3: ", 3-D q/k/v with the heads merged into the batch", 2: ", 2-D q/k/v (one head)"}.get(self.rank, "")


def shaped(operands: Sequence) -> Union[Shaped, Refusal]:
    """How the q, k, v ``operands`` reach the kernel, or why the kernel cannot take them."""
    ranks = {rank(value) for value in operands} - {None}
    if not ranks or ranks == {4}:
        return Shaped(4 if ranks else None)
    if len(ranks) == 1 and ranks <= {2, 3}:
        return Shaped(ranks.pop())
    listed = ", ".join(str(r) for r in sorted(ranks))
    return blocked(None, f"q, k and v are {listed}-D as the code builds them, a rank npu_fusion_attention does not take "
                         "(4-D [B, N, S, D], 3-D with the heads merged into the batch, or 2-D)", RANK_PLAN)
