"""Helper modules that fused rewrites vendor into the migrated repo (copied, never imported here)."""
