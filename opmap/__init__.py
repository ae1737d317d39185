"""The operator table: YAML records describing what each torch API, declared package and launcher
setting becomes on an NPU."""

from npu_migrate.opmap.environment import EnvironmentRecord
from npu_migrate.opmap.packages import IndexRecord, PackageRecord
from npu_migrate.opmap.records import PLANS, STATUSES, Fallback, OpRecord, Tolerance
from npu_migrate.opmap.table import OpTable, load_file, load_sections, load_table
from npu_migrate.opmap.yaml_source import SchemaError

__all__ = ["PLANS", "STATUSES", "EnvironmentRecord", "Fallback", "IndexRecord", "OpRecord", "OpTable", "PackageRecord",
           "SchemaError", "Tolerance", "load_file", "load_sections", "load_table"]
