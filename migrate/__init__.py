"""npu-migrate: rewrite PyTorch model code for Huawei Ascend NPUs."""

__version__ = "0.1.0"
HOMEPAGE = "https://pypi.org/project/npu-migrate/"  # pyproject.toml's [project.urls] Homepage (a test checks)
