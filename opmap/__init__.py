"""The operator table: YAML records describing what each torch API becomes on an NPU."""
