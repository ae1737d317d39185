"""The operator table: YAML records describing what each torch API becomes on an NPU."""

from npu_migrate.opmap.records import PLANS, STATUSES, Fallback, OpRecord, Tolerance
from npu_migrate.opmap.table import OpTable, load_file, load_table
from npu_migrate.opmap.yaml_source import SchemaError

__all__ = ["PLANS", "STATUSES", "Fallback", "OpRecord", "OpTable", "SchemaError", "Tolerance", "load_file", "load_table"]
