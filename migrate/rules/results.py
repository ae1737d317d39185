"""What a fused rule's matcher returns when it cannot rewrite a site: ``Blocked``, the node to point
at, why, and the plan for the user (the finding the rule reports instead of an edit). A low module:
every family's matcher imports it, and it imports no rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from ...opmap import Fallback


@dataclass
class Blocked:
    node: cst.CSTNode
    reason: str
    fallback: Fallback
    root: Optional[cst.CSTNode] = None  # the product with V in the function (where to point when `node` is in a helper)
