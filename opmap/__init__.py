"""The operator table: YAML records describing what each torch API, declared package and launcher
setting becomes on an NPU."""

from .environment import EnvironmentRecord
from .packages import IndexRecord, PackageRecord
from .records import PLANS, STATUSES, Fallback, OpRecord, Tolerance
from .table import OpTable, load_file, load_sections, load_table
from .yaml_source import SchemaError

__all__ = ["PLANS", "STATUSES", "EnvironmentRecord", "Fallback", "IndexRecord", "OpRecord", "OpTable", "PackageRecord",
           "SchemaError", "Tolerance", "load_file", "load_sections", "load_table"]
