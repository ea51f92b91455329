"""Generic rewriting of expressions inside statements (a pass helper): the schema's walks
(vyre/ir/schema.py), under the names passes import."""

from __future__ import annotations

from .schema import Rewrite, map_expr, map_exprs

__all__ = ["Rewrite", "map_expr", "map_exprs"]
